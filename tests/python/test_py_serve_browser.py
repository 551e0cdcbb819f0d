"""The explorer page (GET / of fovea.serve) in Debian's headless Chromium, driven by Selenium:
pick an image, click two fixations, tokenize, encode; the page shows the overlay and the numbers
the service returned. Skipped when Chromium, its driver or Selenium is not installed.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from pyhelpers import SOURCE, photo, save_png

HF_VIT = os.path.join(SOURCE, "tests", "data", "encoder", "hf_vit", "model.safetensors")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or ("/usr/lib/chromium/chromedriver"
                                          if os.path.exists("/usr/lib/chromium/chromedriver") else None)

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(DRIVER is None, reason="chromedriver is not installed (apt-get install chromium-driver)"),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (apt-get install python3-selenium)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen([sys.executable, "-m", "fovea.serve", "--port", "0", "--model", f"vit={HF_VIT}", "--model",
                          "random:vit-s16"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("fovea serve: http://"):
        p.kill()
        pytest.fail(f"the service did not start: {line!r} {p.stderr.read()}")
    yield line.split()[2]
    p.terminate()
    p.wait(60)


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="fovea-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # No network here: without these Chromium keeps trying Google's hosts.
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER) if hasattr(webdriver, "ChromeService")
                         else webdriver.chrome.service.Service(executable_path=DRIVER), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def test_explorer_tokenizes_and_encodes(server, browser, tmp_path):
    img = save_png(photo(7, 180, 240), str(tmp_path / "photo.png"))
    b = browser
    b.get(server + "/")
    wait = WebDriverWait(b, 60)
    wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Ready"))
    options = [o.get_attribute("value") for o in b.find_elements(By.CSS_SELECTOR, "#model option")]
    assert options == ["vit", "random-vit-s16"]

    b.find_element(By.ID, "file").send_keys(img)
    wait.until(lambda d: "240×180" in d.find_element(By.ID, "status").text)
    picture = b.find_element(By.ID, "picture")
    # Two clicks on the picture: fixations in image pixels, drawn as dots.
    w, h = picture.size["width"], picture.size["height"]
    webdriver.ActionChains(b).move_to_element_with_offset(picture, -w // 4, -h // 4).click().perform()
    webdriver.ActionChains(b).move_to_element_with_offset(picture, w // 4, h // 4).click().perform()
    assert len(b.find_elements(By.CSS_SELECTOR, ".dot")) == 2
    fix = b.find_element(By.ID, "fixations").text
    assert fix.count("(") == 2

    b.find_element(By.ID, "tokenize").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Tokenized"))
    stats = b.find_element(By.ID, "stats").text
    assert "foveation: windows" in stats and "windows" in stats and "cache: miss" in stats
    overlay = b.find_element(By.ID, "overlay")
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", overlay) == 240)

    b.find_element(By.ID, "encode").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Encoded"))
    enc = b.find_element(By.ID, "encode-stats").text
    assert enc.startswith("embeddings: ") and "× 32" in enc and "cache: miss" in enc

    # Another model and a budget: the mixed foveation, within the budget; an error shows in the status line.
    b.find_element(By.CSS_SELECTOR, "#model option[value='random-vit-s16']").click()
    b.find_element(By.ID, "budget").send_keys("40")
    b.find_element(By.ID, "tokenize").click()
    wait.until(lambda d: "foveation: mixed" in d.find_element(By.ID, "stats").text)
    assert int(b.find_element(By.ID, "stats").text.split()[1]) <= 40
    b.find_element(By.ID, "budget").send_keys("0000")  # 400000: over the service's limit
    b.find_element(By.ID, "tokenize").click()
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("class") == "error")
    assert b.find_element(By.ID, "status").text == "tokenize: budget must be in [1, 4096], got 400000"
    b.save_screenshot(str(tmp_path / "explorer.png"))
