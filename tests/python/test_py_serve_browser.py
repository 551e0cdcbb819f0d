"""The explorer page (GET / of fovea.serve) in Debian's headless Chromium, driven by Selenium:
upload a photo, click a point, drag a region, move the budget slider, change the foveation,
hover a token, encode, download the file; each step checks what the page shows against what
the service returned. The screenshot and the page's update times are saved as artefacts in
<build>/test-artifacts/ (FOVEA_TEST_ARTIFACTS overrides). Skipped when Chromium, its driver or
Selenium is not installed. No timing assertions: the update times are recorded, not judged.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import fovea
from pyhelpers import ASTRONAUT, CLI, SOURCE

HF_VIT = os.path.join(SOURCE, "tests", "data", "encoder", "hf_vit", "model.safetensors")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver") or ("/usr/lib/chromium/chromedriver"
                                          if os.path.exists("/usr/lib/chromium/chromedriver") else None)
ARTIFACTS = os.environ.get("FOVEA_TEST_ARTIFACTS") or os.path.join(os.path.dirname(os.path.abspath(CLI)), "test-artifacts")

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
                          "random:vit-s16", "--max-budget", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    if not line.startswith("fovea serve: http://"):
        p.kill()
        pytest.fail(f"the service did not start: {line!r} {p.stderr.read()}")
    yield line.split()[2]
    p.terminate()
    p.wait(60)


@pytest.fixture(scope="module")
def downloads():
    d = tempfile.mkdtemp(prefix="fovea-downloads-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(downloads):
    profile = tempfile.mkdtemp(prefix="fovea-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # No network here: without these Chromium keeps trying Google's hosts.
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1500,1000", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": downloads, "download.prompt_for_download": False})
    d = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER) if hasattr(webdriver, "ChromeService")
                         else webdriver.chrome.service.Service(executable_path=DRIVER), options=opts)
    d.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def big_photo(path):
    """A 1024x1024 JPEG (the astronaut, scaled up): the size the explorer's live updates are for."""
    from PIL import Image
    Image.open(ASTRONAUT).convert("RGB").resize((1024, 1024), Image.BICUBIC).save(path, quality=92)
    return path


def page_state(b):
    return b.execute_script("const s = window.fovea; return {tokens: s.tokens, fixations: s.fixations, "
                            "regions: s.regions, ms: s.lastUpdateMs, busy: s.busy || s.dirty, seq: s.seq};")


def settled(b):
    """The page's state once no tokenization is in flight or pending."""
    s = page_state(b)
    return s if not s["busy"] and s["tokens"] is not None else False


def test_explorer(server, browser, downloads, tmp_path):
    img = big_photo(str(tmp_path / "photo.jpg"))
    b = browser
    b.get(server + "/")
    wait = WebDriverWait(b, 60)
    wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Ready"))
    options = [o.get_attribute("value") for o in b.find_elements(By.CSS_SELECTOR, "#model option")]
    assert options == ["vit", "random-vit-s16"]
    # Everything the page loads comes from the service.
    assert b.execute_script("return [...document.querySelectorAll('script[src], link[href], img[src^=http]')].length") == 0

    # Upload: the first tokenization (no query) is shown.
    b.find_element(By.ID, "file").send_keys(img)
    first = wait.until(settled)
    assert first["tokens"]["image_size"] == [1024, 1024] and first["tokens"]["metadata"]["query"] == "none"
    pixels = "return document.getElementById(arguments[0]).toDataURL()"
    before, seen = b.execute_script(pixels, "overlay"), b.execute_script(pixels, "seen")
    assert before.startswith("data:image/png;base64,") and len(before) > 10000 and len(seen) > 10000

    # Click a point: the overlay changes and the returned metadata's fixation is that point.
    picture = b.find_element(By.ID, "input-canvas")
    w, h = picture.size["width"], picture.size["height"]
    webdriver.ActionChains(b).move_to_element_with_offset(picture, -w // 4, -h // 5).click().perform()
    s = wait.until(lambda d: (x := settled(d)) and x["seq"] > first["seq"] and x)
    (fx, fy), = s["fixations"]
    assert abs(fx - (w / 4) * 1024 / w) <= 1024 / w + 1 and abs(fy - (h / 2 - h / 5) * 1024 / h) <= 1024 / h + 1
    assert s["tokens"]["metadata"]["query"] == f"fixation({fx},{fy})"
    assert b.execute_script(pixels, "overlay") != before and b.execute_script(pixels, "seen") != seen
    assert b.find_element(By.ID, "query").text == f"fixation({fx},{fy})"

    # Drag a region: it joins the query.
    (webdriver.ActionChains(b).move_to_element_with_offset(picture, w // 8, h // 8).click_and_hold()
     .move_by_offset(w // 6, h // 8).release().perform())
    s = wait.until(lambda d: (x := settled(d)) and x["regions"] and x)
    (x0, y0, x1, y1), = s["regions"]
    assert x1 - x0 > 100 and y1 - y0 > 80
    assert s["tokens"]["metadata"]["query"] == f"fixation({fx},{fy}) region({x0},{y0},{x1},{y1})"

    # The budget slider and the foveation selector re-tokenize.
    b.execute_script("const r = document.getElementById('budget'); r.value = 40; r.dispatchEvent(new Event('input'));")
    s = wait.until(lambda d: (x := settled(d)) and x["tokens"]["budget"] == 40 and x)
    assert s["tokens"]["tokens"] <= 40
    b.find_element(By.CSS_SELECTOR, "#foveation option[value='mixed']").click()
    s = wait.until(lambda d: (x := settled(d)) and x["tokens"]["foveation"] == "mixed" and x)
    assert "foveation: mixed" in b.find_element(By.ID, "stats").text

    # Hover a token: its level, position and norm.
    canvas = b.find_element(By.ID, "overlay-canvas")
    webdriver.ActionChains(b).move_to_element_with_offset(canvas, 3, 3).perform()
    tip = b.find_element(By.ID, "tooltip")
    wait.until(lambda d: tip.is_displayed())
    text = tip.text
    assert "level " in text and "centre (" in text and "patch norm " in text, text

    # Encode: the hover adds the embedding's norm.
    b.find_element(By.ID, "encode").click()
    wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("Encoded"))
    assert "embeddings: " in b.find_element(By.ID, "encode-stats").text
    webdriver.ActionChains(b).move_to_element_with_offset(canvas, 5, 5).perform()
    wait.until(lambda d: "embedding norm " in tip.text)

    # Download: the file the service encodes for this query.
    b.find_element(By.ID, "download").click()
    saved = os.path.join(downloads, "photo.safetensors")
    wait.until(lambda d: os.path.exists(saved) and d.find_element(By.ID, "status").text.startswith("Saved"))
    f = fovea.load(saved)
    assert f.metadata["query"] == s["tokens"]["metadata"]["query"] and f["embeddings"].shape[0] <= 40

    # Live updates of the 1024x1024 photo with 16-pixel patches: slider moves, each timed by the page
    # from the request to both pictures drawn (recorded, not judged).
    b.find_element(By.CSS_SELECTOR, "#model option[value='random-vit-s16']").click()
    wait.until(lambda d: (x := settled(d)) and x["tokens"]["model"] == "random-vit-s16")
    times = []
    for budget in (60, 120, 200, 273, 392, 200, 100):
        b.execute_script(f"const r = document.getElementById('budget'); r.value = {budget}; "
                         "r.dispatchEvent(new Event('input'));")
        s = wait.until(lambda d: (x := settled(d)) and x["tokens"]["budget"] == budget and x)
        times.append(round(s["ms"], 1))

    # A service error shows in the status line.
    b.execute_script("const r = document.getElementById('budget'); r.max = 5000; r.value = 1024; "
                     "r.dispatchEvent(new Event('input'));")
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("class") == "error")
    assert b.find_element(By.ID, "status").text == "tokenize: budget must be in [1, 1000], got 1024"

    os.makedirs(ARTIFACTS, exist_ok=True)
    b.execute_script("const r = document.getElementById('budget'); r.value = 200; r.dispatchEvent(new Event('input'));")
    wait.until(settled)
    b.save_screenshot(os.path.join(ARTIFACTS, "explorer.png"))
    with open(os.path.join(ARTIFACTS, "explorer-updates.json"), "w") as fh:
        json.dump({"image": "1024x1024 JPEG", "model": "random:vit-s16 (16-px patches)", "update_ms": times, "median_ms": float(np.median(times)),
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg": os.getloadavg()}, fh)
    print(f"explorer: live updates of a 1024x1024 photo took {times} ms (median {np.median(times):.0f}); "
          f"screenshot in {ARTIFACTS}")
