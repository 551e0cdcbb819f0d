// fovea/tokenizer.hpp — the former name of fovea/tokenize.hpp (the tokenize stage's header: folder
// src/tokenize, target fovea::tokenize), kept for one release so that programs written against it
// still compile. New code includes fovea/tokenize.hpp (docs/reference/api-stability.md).
//
//   fovea::Executor exec;
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("in.jpg"), fovea::Query{}, fovea::TokenizeParams{}, exec);
#pragma once
#include "fovea/export.hpp"

#include "fovea/tokenize.hpp"
