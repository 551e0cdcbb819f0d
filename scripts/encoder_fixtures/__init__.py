"""The encoder test fixtures (tests/data/encoder/), one module per model family; the command is
scripts/make_encoder_fixtures.py. Files are written with scripts/fovea_testio/."""
