"""The page's Edit and Inpaint modes in headless Chromium (WebGPU on SwiftShader), driven through stable element ids.

Input images are made here with Pillow. Files reach the page the three ways a person gives them: the file pickers
(Playwright's set_input_files), a drop (a DataTransfer holding a File, dispatched as dragover + drop) and a paste
(a ClipboardEvent carrying the same). The painted mask is read back through the page's own "Save mask PNG".
The end-to-end tests run the tiny fp32 model through the UI. The page's CSP forbids eval, so every Playwright
predicate below is a function, never a bare expression string.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import LiveServer, start_server  # tests/ is on sys.path (rootdir-relative conftest import)
from PIL import Image

from builder import REPO_ROOT
from builder.check.driver.chromium import launch_persistent

pytestmark = pytest.mark.browser

GENERATE_TIMEOUT_MS = 240_000
POLL_MS = 100
SCREENSHOT = REPO_ROOT / "docs" / "editing-ui.png"

# A File built in the page from base64 bytes, handed to a drop or a paste as a person's would be.
DISPATCH_FILES_JS = """
([kind, selector, files]) => {
    const transfer = new DataTransfer();
    for (const [name, type, data] of files) {
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        transfer.items.add(new File([bytes], name, { type }));
    }
    const target = document.querySelector(selector);
    if (kind === 'drop') {
        for (const type of ['dragenter', 'dragover', 'drop']) {
            target.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer: transfer }));
        }
    } else {
        target.focus();
        target.dispatchEvent(new ClipboardEvent('paste', { bubbles: true, cancelable: true, clipboardData: transfer }));
    }
}
"""


def png_bytes(width: int, height: int, *, colour: tuple[int, int, int] = (200, 80, 40), pattern: bool = True) -> bytes:
    """A PNG with some structure (a gradient and a square), so a VAE has something to encode."""
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[..., 0] = colour[0]
    pixels[..., 1] = (x * 255 // max(1, width - 1)).astype(np.uint8) if pattern else colour[1]
    pixels[..., 2] = (y * 255 // max(1, height - 1)).astype(np.uint8) if pattern else colour[2]
    pixels[height // 4 : height // 2, width // 4 : width // 2] = (250, 250, 250)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def write_png(folder: Path, name: str, width: int, height: int, **kwargs: Any) -> Path:
    path = folder / name
    path.write_bytes(png_bytes(width, height, **kwargs))
    return path


def dispatch_files(page: Any, kind: str, selector: str, files: list[tuple[str, str, bytes]]) -> None:
    encoded = [[name, mime, base64.b64encode(data).decode("ascii")] for name, mime, data in files]
    page.evaluate(DISPATCH_FILES_JS, [kind, selector, encoded])


def wait_references(page: Any, count: int) -> None:
    page.wait_for_function(
        "(n) => document.querySelectorAll('#references li').length === n", arg=count, polling=POLL_MS
    )


def wait_error(page: Any, text: str) -> str:
    page.wait_for_function("(t) => document.querySelector('#error').textContent.includes(t)", arg=text, polling=POLL_MS)
    return str(page.inner_text("#error"))


def choose_mode(page: Any, mode: str) -> None:
    page.click(f"label[for=mode-{mode}]")
    assert page.is_checked(f"#mode-{mode}")


def set_range(page: Any, selector: str, value: float) -> None:
    """A range input as a person moves it: the value, then the input event."""
    page.eval_on_selector(
        selector,
        "(input, v) => { input.value = String(v); input.dispatchEvent(new Event('input', { bubbles: true })); }",
        value,
    )


def save_mask(page: Any, folder: Path, name: str) -> np.ndarray:
    with page.expect_download() as info:
        page.click("#mask-download")
    path = folder / name
    info.value.save_as(path)
    with Image.open(path) as image:
        assert image.mode == "L", f"the mask is a greyscale PNG, got mode {image.mode}"
        return np.asarray(image).copy()


def paint_stroke(page: Any, start: tuple[float, float], end: tuple[float, float]) -> None:
    """A mouse stroke across #mask-canvas, from and to fractions of its box."""
    canvas = page.locator("#mask-canvas")
    canvas.scroll_into_view_if_needed()
    # The page scrolls smoothly (an error message is brought into view): wait until the canvas stands still.
    box = None
    for _ in range(50):
        page.wait_for_timeout(50)
        latest = canvas.bounding_box()
        if latest is not None and latest == box:
            break
        box = latest
    assert box is not None
    page.mouse.move(box["x"] + start[0] * box["width"], box["y"] + start[1] * box["height"])
    page.mouse.down()
    page.mouse.move(box["x"] + end[0] * box["width"], box["y"] + end[1] * box["height"], steps=8)
    page.mouse.up()


@pytest.fixture(scope="module")
def server(
    dist_dir: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    live = start_server(dist_dir, tmp_path_factory.mktemp("editing-server"), models=tiny_models["fp32"])
    yield live
    live.stop()


@pytest.fixture(scope="module")
def context(profile_dir: Path, chromium_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        ctx = launch_persistent(playwright, profile_dir, executable=chromium_path)
        try:
            yield ctx
        finally:
            ctx.close()


@pytest.fixture
def page(context: Any, server: LiveServer) -> Iterator[Any]:
    tab = context.new_page()
    tab.set_viewport_size({"width": 1280, "height": 900})
    tab.on("console", lambda m: print(f"[console.{m.type}] {m.text}") if m.type in ("error", "warning") else None)
    tab.on("pageerror", lambda error: print(f"[pageerror] {error}"))
    tab.goto(server.url("/"))
    # Settled, as a person finds it: the probe's answer fills the panels above the form, which moves the controls a
    # click aims at.
    tab.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)
    yield tab
    tab.close()


def test_text_to_image_shows_no_editing_controls(page: Any) -> None:
    assert page.is_checked("#mode-text")
    assert not page.is_visible("#editing") and not page.is_visible("#match-size-field")
    assert page.is_hidden('#stages li[data-stage="images"]')
    # The mode is a radio group: the keyboard switches it.
    page.focus("#mode-text")
    page.keyboard.press("ArrowRight")
    assert page.is_checked("#mode-edit") and page.is_visible("#editing")


def test_references_by_picker_drop_and_paste_with_token_costs(page: Any, tmp_path: Path) -> None:
    choose_mode(page, "edit")
    assert "up to 4 images" in page.inner_text("#reference-tokens")
    page.set_input_files("#reference-files", str(write_png(tmp_path, "wide.png", 1100, 1000)))
    wait_references(page, 1)
    first = page.inner_text("#references li:nth-child(1)")
    assert "wide.png" in first and "1100x1000 -> 1072x976, 4,087 tokens" in first, first
    assert page.get_attribute("#references li:nth-child(1) img", "alt") == "Reference 1: wide.png"
    # Edit's output size follows the first image's used size.
    assert page.input_value("#size") == "custom"
    assert (page.input_value("#width"), page.input_value("#height")) == ("1072", "976")

    dispatch_files(page, "drop", "#prompt", [("dropped.png", "image/png", png_bytes(128, 64))])
    wait_references(page, 2)
    assert "128x64, 32 tokens" in page.inner_text("#references li:nth-child(2)")

    dispatch_files(page, "paste", "#prompt", [("pasted.png", "image/png", png_bytes(200, 100))])
    wait_references(page, 3)
    # 200x100 -> 192x96: 12 x 6 patches.
    assert "200x100 -> 192x96, 72 tokens" in page.inner_text("#references li:nth-child(3)")
    assert "3 of 4 images: 4,191 tokens added to every step" in page.inner_text("#reference-tokens")
    assert page.input_value("#prompt") == "", "pasting an image does not paste text into the prompt"

    page.click("#references li:nth-child(1) button")
    wait_references(page, 2)
    assert "dropped.png" in page.inner_text("#references li:nth-child(1)")
    assert "2 of 4 images: 104 tokens" in page.inner_text("#reference-tokens")
    # The first image is now 128x64, and the size still matches it...
    assert (page.input_value("#width"), page.input_value("#height")) == ("128", "64")
    # ...until the user picks another size.
    page.select_option("#size", "512x512")
    assert not page.is_checked("#match-size")
    page.click("#references li:nth-child(1) button")
    assert page.input_value("#size") == "512x512"


def test_a_drop_in_text_to_image_switches_to_edit(page: Any) -> None:
    dispatch_files(page, "drop", "#prompt", [("cat.png", "image/png", png_bytes(64, 64))])
    wait_references(page, 1)
    assert page.is_checked("#mode-edit")


def test_refused_files_say_why_and_add_nothing(page: Any, tmp_path: Path) -> None:
    choose_mode(page, "edit")
    page.set_input_files("#reference-files", str(write_png(tmp_path, "tiny.png", 40, 40)))
    message = wait_error(page, "tiny.png")
    assert "40x40" in message and "at least 64" in message, message
    wait_references(page, 0)

    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    page.set_input_files("#reference-files", str(notes))
    message = wait_error(page, "notes.txt")
    assert "is not a PNG, JPEG or WebP file" in message, message
    wait_references(page, 0)

    # A batch with one bad file adds none of it.
    page.set_input_files("#reference-files", [str(write_png(tmp_path, "good.png", 64, 64)), str(notes)])
    wait_error(page, "notes.txt")
    page.wait_for_timeout(300)
    wait_references(page, 0)

    page.set_input_files("#reference-files", [str(write_png(tmp_path, f"r{i}.png", 64, 64)) for i in range(4)])
    wait_references(page, 4)
    assert page.inner_text("#error") == "", "a file taken clears the message about the one refused"
    assert page.is_disabled("#add-references")
    dispatch_files(page, "paste", "#prompt", [("fifth.png", "image/png", png_bytes(64, 64))])
    message = wait_error(page, "fifth.png")
    assert "At most 4" in message, message
    wait_references(page, 4)


CORPUS = REPO_ROOT / "tests" / "data" / "input_images"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("refuse.gif", "is not a PNG, JPEG or WebP file; save it as PNG."),
        ("refuse.bmp", "is not a PNG, JPEG or WebP file; save it as PNG."),
        ("refuse_truncated.png", "cannot be decoded: the file is damaged or incomplete; save it again."),
        ("refuse_animated.webp", "is animated; save the frame to use as a PNG."),
    ],
)
def test_the_page_refuses_what_the_cli_refuses_in_its_words(page: Any, name: str, reason: str) -> None:
    """The page reads files by the worker's and the CLI's contract (tests/browser/test_decoding.py holds the two to
    it): a GIF, a BMP, a damaged or an animated file is refused when added, not at Generate."""
    from builder.errors import InputError
    from builder.pipeline import inputs

    with pytest.raises(InputError) as cli:
        inputs.read_image(CORPUS / name)
    assert str(cli.value).endswith(reason)
    choose_mode(page, "edit")
    page.set_input_files("#reference-files", str(CORPUS / name))
    message = wait_error(page, name)
    assert f"Reference 1 ({name}) {reason}" in message, message
    wait_references(page, 0)


def test_a_mask_is_read_as_the_worker_reads_it(page: Any, tmp_path: Path) -> None:
    """A mask whose transparent pixels are white is white (repaint) for diffusers: the painter shows it painted."""
    choose_mode(page, "inpaint")
    page.set_input_files("#source-file", str(write_png(tmp_path, "room.png", 80, 96)))
    page.wait_for_function("() => !document.querySelector('#painter').hidden", polling=POLL_MS)
    page.set_input_files("#mask-file", str(CORPUS / "mask_la_transparent_white.png"))
    page.wait_for_function(
        "() => document.querySelector('#mask-info').textContent.includes('transparent_white')", polling=POLL_MS
    )
    # The corner (0, 0) of the mask is transparent white: painted, as the worker and the CLI read it.
    corner = page.evaluate(
        "() => document.querySelector('#mask-canvas').getContext('2d').getImageData(1, 1, 1, 1).data[3]"
    )
    assert corner == 255, corner
    page.set_input_files("#mask-file", str(CORPUS / "refuse_mask_grey16.png"))
    message = wait_error(page, "refuse_mask_grey16.png")
    assert "is a 16-bit greyscale PNG, which diffusers reads clipped to white" in message, message


def test_a_file_deleted_after_it_was_added_is_named_with_what_to_do(page: Any, tmp_path: Path) -> None:
    choose_mode(page, "edit")
    page.fill("#prompt", "a fox")
    gone = write_png(tmp_path, "gone.png", 64, 64)
    page.set_input_files("#reference-files", str(gone))
    wait_references(page, 1)
    gone.unlink()
    page.click("#generate")
    message = wait_error(page, "gone.png")
    assert "Reference 1 (gone.png) can no longer be read" in message, message
    assert "add it again" in message, message


def test_inpaint_mask_painter_exports_what_was_painted(page: Any, tmp_path: Path) -> None:
    choose_mode(page, "inpaint")
    assert page.is_visible("#inpaint-source") and page.is_visible("#strength-field")
    assert "Reference images (optional)" in page.inner_text("#references-label")
    page.set_input_files("#source-file", str(write_png(tmp_path, "room.png", 200, 120)))
    page.wait_for_selector("#painter:not([hidden])")
    assert page.get_attribute("#source-image", "alt") == "Image to inpaint: room.png"
    # The output size is the source's used size, and locked there.
    assert (page.input_value("#width"), page.input_value("#height")) == ("192", "112")
    assert page.is_disabled("#size")
    assert "200x120 -> 192x112" in page.inner_text("#source-info")

    # An empty mask is refused before anything is sent.
    page.click("#generate")
    assert "mask is empty" in wait_error(page, "mask")

    # Extend: the output size follows the extended image (200+40 x 120, used at 240x112); a refused value says why
    # in the worker's words and leaves the image's size; emptied, the size is the image's again.
    assert page.is_visible("#extend-field")
    page.fill("#extend-right", "40")
    assert (page.input_value("#width"), page.input_value("#height")) == ("240", "112")
    assert "Extended to 240x120, used at 240x112" in page.inner_text("#extend-info")
    page.fill("#extend-right", "-5")
    assert "The extension's right must be from 0 to 2048 pixels, got -5." in page.inner_text("#extend-info")
    assert (page.input_value("#width"), page.input_value("#height")) == ("192", "112")
    page.fill("#extend-right", "")
    assert (page.input_value("#width"), page.input_value("#height")) == ("192", "112")

    set_range(page, "#brush-size", 16)
    paint_stroke(page, (0.1, 0.5), (0.5, 0.5))
    painted = save_mask(page, tmp_path, "painted.png")
    assert painted.shape == (120, 200), "the mask has the source's natural size"
    assert painted[60, 50] == 255 and painted[60, 60] == 255, "the stroke is white"
    assert painted[10, 190] == 0 and painted[110, 10] == 0, "the rest is black"

    page.click("#mask-invert")
    inverted = save_mask(page, tmp_path, "inverted.png")
    assert np.abs(inverted.astype(int) - (255 - painted.astype(int))).max() <= 1

    # The eraser takes paint away.
    page.click("label[for=tool-erase]")
    paint_stroke(page, (0.7, 0.1), (0.7, 0.9))
    erased = save_mask(page, tmp_path, "erased.png")
    assert erased[60, 140] == 0 and erased[60, 180] == 255
    page.click("label[for=tool-paint]")

    # A soft edge blurs the outline on export.
    page.click("#mask-clear")
    assert save_mask(page, tmp_path, "cleared.png").max() == 0
    paint_stroke(page, (0.5, 0.5), (0.5, 0.5))
    set_range(page, "#soft-edge", 4)
    assert page.inner_text("#soft-edge-value") == "4 px"
    soft = save_mask(page, tmp_path, "soft.png")
    assert soft.max() > 0 and len(np.unique(soft)) > 4, "a soft edge has greys"

    # A mask file replaces the painted one; any size will do (it is resized to the image), colour will not.
    coloured = tmp_path / "coloured.png"
    Image.fromarray(np.full((64, 64, 3), (255, 0, 0), dtype=np.uint8)).save(coloured)
    page.set_input_files("#mask-file", str(coloured))
    assert "greyscale" in wait_error(page, "coloured.png")
    mask_file = tmp_path / "half.png"
    half = np.zeros((64, 128), dtype=np.uint8)
    half[:, 64:] = 255
    Image.fromarray(half).save(mask_file)
    page.set_input_files("#mask-file", str(mask_file))
    page.wait_for_function(
        "() => document.querySelector('#mask-info').textContent.includes('half.png')", polling=POLL_MS
    )
    loaded = save_mask(page, tmp_path, "loaded.png")
    assert loaded.shape == (64, 128) and (loaded == half).all(), "an untouched mask file is sent as given"
    # Painting over it makes it a painted mask, at the image's size, the file's right half still white.
    paint_stroke(page, (0.1, 0.1), (0.1, 0.1))
    repainted = save_mask(page, tmp_path, "repainted.png")
    assert repainted.shape == (120, 200) and repainted[60, 150] == 255 and repainted[60, 60] == 0

    page.fill("#steps", "10")
    page.dispatch_event("#steps", "input")
    assert page.input_value("#strength") == "0.8"
    assert "Runs 8 of 10 steps" in page.inner_text("#strength-steps")
    set_range(page, "#strength", 0.35)
    # t_start = int(max(10 - min(10 * 0.35, 10), 0)) = 6, so 4 of 10 run.
    assert "Runs 4 of 10 steps" in page.inner_text("#strength-steps")
    assert page.inner_text("#strength-value") == "0.35"


def test_screenshot_of_the_editing_ui(page: Any, tmp_path: Path) -> None:
    page.fill("#prompt", "the cat from the first image wearing the hat from the second, studio photo")
    choose_mode(page, "edit")
    page.set_input_files(
        "#reference-files",
        [
            str(write_png(tmp_path, "cat.png", 1100, 1000)),
            str(write_png(tmp_path, "hat.png", 768, 512, colour=(40, 90, 200))),
        ],
    )
    wait_references(page, 2)
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)
    page.evaluate("() => window.scrollTo(0, 0)")
    shot = tmp_path / "editing-ui.png"
    page.locator("#app").screenshot(path=str(shot))
    if os.environ.get("KLEIN_WEB_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, SCREENSHOT)
    overflow = page.evaluate("() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
    assert overflow[0] <= overflow[1]


# ---------- history's database: entries from before editing survive its upgrade ----------

MAKE_V1_DB_JS = """
async () => {
    await new Promise((resolve, reject) => {
        const gone = indexedDB.deleteDatabase('klein-web-history');
        gone.onsuccess = resolve;
        gone.onerror = () => reject(gone.error);
    });
    const db = await new Promise((resolve, reject) => {
        const request = indexedDB.open('klein-web-history', 1);
        request.onupgradeneeded = () => request.result.createObjectStore('generations', { keyPath: 'id', autoIncrement: true });
        request.onsuccess = () => resolve(request.result);
        request.onerror = () => reject(request.error);
    });
    const canvas = new OffscreenCanvas(8, 8);
    canvas.getContext('2d').fillRect(0, 0, 8, 8);
    const thumb = await canvas.convertToBlob({ type: 'image/jpeg' });
    const transaction = db.transaction('generations', 'readwrite');
    transaction.objectStore('generations').add({
        createdAt: Date.now(), modelLabel: 'old', totalMs: 1000, thumb,
        params: { prompt: 'an entry from before editing', seed: 77, steps: 4, width: 64, height: 64, modelBase: 'x' },
    });
    await new Promise((resolve) => (transaction.oncomplete = resolve));
    db.close();
}
"""

COUNT_STORES_JS = """
async () => {
    const db = await new Promise((resolve, reject) => {
        const request = indexedDB.open('klein-web-history');
        request.onsuccess = () => resolve(request.result);
        request.onerror = () => reject(request.error);
    });
    const count = (name) => new Promise((resolve) => {
        const request = db.transaction(name).objectStore(name).count();
        request.onsuccess = () => resolve(request.result);
    });
    const counts = { version: db.version, generations: await count('generations'), inputs: await count('inputs') };
    db.close();
    return counts;
}
"""


def test_history_from_before_editing_survives_the_upgrade(context: Any, server: LiveServer) -> None:
    tab = context.new_page()
    try:
        tab.goto(server.url("/no-app-here"))  # the origin without the app, so nothing holds the database open
        tab.evaluate(MAKE_V1_DB_JS)
        tab.goto(server.url("/"))
        tab.wait_for_selector("#history .history-item")
        assert tab.evaluate(COUNT_STORES_JS) == {"version": 2, "generations": 1, "inputs": 0}
        choose_mode(tab, "edit")
        tab.click("#history .history-item")
        tab.wait_for_function("() => document.querySelector('#mode-text').checked", polling=POLL_MS)
        assert tab.input_value("#prompt") == "an entry from before editing"
        assert tab.input_value("#seed") == "77"
        tab.click("#clear-history")
        tab.wait_for_selector("#history .empty")
    finally:
        tab.close()


# ---------- end to end: the tiny model through the UI ----------


def generate(page: Any) -> None:
    page.click("#generate")
    page.wait_for_function(
        "() => ['done', 'error'].includes(document.body.dataset.state)", timeout=GENERATE_TIMEOUT_MS, polling=POLL_MS
    )
    assert page.evaluate("() => document.body.dataset.state") == "done", page.inner_text("#error")


def downloaded_png(page: Any, folder: Path) -> tuple[Path, dict[str, str]]:
    with page.expect_download() as info:
        page.click("#download")
    path = folder / info.value.suggested_filename
    info.value.save_as(path)
    with Image.open(path) as image:
        return path, {str(k): str(v) for k, v in getattr(image, "text", {}).items()}


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_edit_and_inpaint_through_the_ui_with_history_and_png_metadata(
    context: Any, server: LiveServer, tmp_path: Path
) -> None:
    tab = context.new_page()
    tab.set_viewport_size({"width": 1280, "height": 900})
    tab.on("pageerror", lambda error: print(f"[pageerror] {error}"))
    tab.goto(server.url("/"))
    tab.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)
    fox = write_png(tmp_path, "fox.png", 80, 64)
    hat = write_png(tmp_path, "hat.png", 64, 96, colour=(30, 160, 90))
    room = write_png(tmp_path, "room.png", 100, 64, colour=(90, 90, 200))

    # Edit: two references; the output takes the first one's used size.
    tab.fill("#prompt", "the fox wearing the hat")
    tab.fill("#seed", "42")
    choose_mode(tab, "edit")
    tab.set_input_files("#reference-files", [str(fox), str(hat)])
    wait_references(tab, 2)
    assert (tab.input_value("#width"), tab.input_value("#height")) == ("80", "64")
    generate(tab)
    assert tab.is_visible('#stages li[data-stage="images"]')
    assert tab.get_attribute('#stages li[data-stage="images"]', "data-status") == "done"
    tab.wait_for_function("() => document.querySelector('#result-image').naturalWidth === 80", polling=POLL_MS)
    assert tab.evaluate("() => document.querySelector('#result-image').naturalHeight") == 64
    assert "Encode images" in tab.inner_text("#timings")
    _, text = downloaded_png(tab, tmp_path)
    assert text["mode"] == "edit"
    assert text["images"] == (f"{sha256(fox.read_bytes())} 80x64 fox.png\n{sha256(hat.read_bytes())} 64x96 hat.png")
    assert "mask" not in text and "strength" not in text
    assert text["prompt"] == "the fox wearing the hat" and text["seed"] == "42" and text["size"] == "80x64"

    # Inpaint: the source, a painted mask, one of the references kept as an optional reference.
    choose_mode(tab, "inpaint")
    tab.click("#references li:nth-child(1) button")  # fox goes, hat stays
    wait_references(tab, 1)
    tab.set_input_files("#source-file", str(room))
    tab.wait_for_selector("#painter:not([hidden])")
    assert (tab.input_value("#width"), tab.input_value("#height")) == ("96", "64")
    paint_stroke(tab, (0.2, 0.5), (0.8, 0.5))
    mask = save_mask(tab, tmp_path, "mask.png")
    mask_bytes = (tmp_path / "mask.png").read_bytes()
    set_range(tab, "#strength", 0.5)
    assert "Runs 2 of 4 steps" in tab.inner_text("#strength-steps")
    generate(tab)
    tab.wait_for_function("() => document.querySelector('#result-image').naturalWidth === 96", polling=POLL_MS)
    _, text = downloaded_png(tab, tmp_path)
    assert text["mode"] == "inpaint"
    assert text["images"] == (f"{sha256(room.read_bytes())} 96x64 room.png\n{sha256(hat.read_bytes())} 64x96 hat.png")
    assert text["mask"] == f"{sha256(mask_bytes)} 96x64 painted-mask.png"
    assert text["strength"] == "0.5"
    assert mask.max() == 255

    # A full storage: the run's entry is not stored at all (not without its files), and the page says why.
    tab.evaluate("""() => {
        const put = IDBObjectStore.prototype.put;
        IDBObjectStore.prototype.put = function (...args) {
            if (this.name === 'inputs') throw new DOMException('Quota exceeded (test).', 'QuotaExceededError');
            return put.apply(this, args);
        };
    }""")
    generate(tab)
    assert "storage for the page is full" in wait_error(tab, "History is full")
    assert tab.evaluate(COUNT_STORES_JS) == {"version": 2, "generations": 2, "inputs": 2}
    assert tab.locator("#history .history-item").count() == 2

    # History keeps the inputs: after a reload, each entry brings its mode, images, mask and strength back.
    tab.reload()
    tab.wait_for_function("() => document.querySelectorAll('#history .history-item').length === 2", polling=POLL_MS)
    assert tab.evaluate(COUNT_STORES_JS)["inputs"] == 2
    assert tab.is_checked("#mode-text") and not tab.is_visible("#editing")
    items = tab.locator("#history .history-item")
    assert "Inpaint, strength 0.5" in items.nth(0).inner_text()
    assert "Edit, 2 images" in items.nth(1).inner_text()
    items.nth(1).click()
    wait_references(tab, 2)
    assert tab.is_checked("#mode-edit")
    assert "fox.png" in tab.inner_text("#references li:nth-child(1)")
    assert "hat.png" in tab.inner_text("#references li:nth-child(2)")
    assert tab.input_value("#prompt") == "the fox wearing the hat"
    items.nth(0).click()
    tab.wait_for_function("() => document.querySelector('#mode-inpaint').checked", polling=POLL_MS)
    tab.wait_for_selector("#painter:not([hidden])")
    assert "room.png" in tab.inner_text("#source-info")
    wait_references(tab, 1)
    assert tab.input_value("#strength") == "0.5"
    assert "painted-mask.png" in tab.inner_text("#mask-info")
    assert (save_mask(tab, tmp_path, "restored.png") == mask).all(), "the mask comes back as it was sent"

    # Deleting an entry deletes its files too.
    tab.hover("#history .history-entry:nth-child(1)")
    tab.click("#history .history-entry:nth-child(1) .history-delete")
    tab.wait_for_function("() => document.querySelectorAll('#history .history-item').length === 1", polling=POLL_MS)
    assert tab.evaluate(COUNT_STORES_JS) == {"version": 2, "generations": 1, "inputs": 1}
    tab.close()


def test_cancel_in_the_encode_images_stage(page: Any, tmp_path: Path) -> None:
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Ready')", polling=POLL_MS)
    choose_mode(page, "edit")
    # Four references keep the VAE encoder busy long enough to cancel inside the stage (checked between images).
    page.set_input_files(
        "#reference-files",
        [str(write_png(tmp_path, f"big{i}.png", 256, 256, colour=(60 * i, 90, 40))) for i in range(4)],
    )
    wait_references(page, 4)
    page.uncheck("#match-size")
    page.select_option("#size", "custom")
    page.fill("#width", "64")
    page.fill("#height", "64")
    page.click("#generate")
    images_stage = '#stages li[data-stage="images"]'
    page.wait_for_function(
        "(s) => document.querySelector(s).dataset.status === 'active'",
        arg=images_stage,
        timeout=GENERATE_TIMEOUT_MS,
        polling=20,
    )
    assert page.is_visible(images_stage) and page.inner_text(images_stage) == "Encode images"
    page.click("#cancel")
    page.wait_for_function(
        "() => document.body.dataset.state !== 'running'", timeout=GENERATE_TIMEOUT_MS, polling=POLL_MS
    )
    assert page.evaluate("() => document.body.dataset.state") == "idle", page.inner_text("#error")
    assert page.inner_text("#status").startswith("Cancelled")
    assert page.is_enabled("#generate") and page.is_disabled("#cancel")
