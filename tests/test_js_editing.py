"""The sampling helpers of editing and inpainting in web_src/src/pipeline (latents.js, schedule.js) against torch
and diffusers 0.42.1, bit for bit: reference-image ids, scale_noise, the mask blend, the mask's bilinear resize to
the latent grid, and the step inpainting starts from."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from builder import REPO_ROOT
from builder.site.node import find_node

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

SRC = REPO_ROOT / "web_src" / "src" / "pipeline"

SCRIPT = """
import { readFileSync, writeFileSync } from 'node:fs';
const [latentsUrl, inpaintUrl, dir] = process.argv.slice(2);
const L = await import(latentsUrl);
const I = await import(inpaintUrl);
const f32 = (name) => {
    const bytes = readFileSync(`${dir}/${name}.bin`);
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice();
};
const cases = JSON.parse(readFileSync(`${dir}/cases.json`, 'utf8'));
const out = {};
out.ids = Array.from(L.prepareImageIds(cases.grids), Number);
out.starts = cases.strengths.map(([n, s]) => { try { return I.inpaintStart(n, s); } catch { return null; } });
writeFileSync(`${dir}/scaled.bin`, L.scaleNoise(f32('sample'), cases.sigma, f32('noise')));
const latents = f32('latents');
L.blendMask(latents, f32('proper'), f32('mask'), cases.channels);
writeFileSync(`${dir}/blended.bin`, latents);
for (const [i, [h, w, oh, ow]] of cases.planes.entries()) {
    writeFileSync(`${dir}/resized_${i}.bin`, L.interpolateBilinear(f32(`plane_${i}`), h, w, oh, ow));
}
writeFileSync(`${dir}/out.json`, JSON.stringify(out));
"""


def test_editing_sampling_helpers_match_torch(tmp_path: Path) -> None:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline

    rng = np.random.default_rng(0)
    seq, channels = 24, 128
    sample, noise, latents, proper = (rng.standard_normal((seq, channels)).astype(np.float32) * 3 for _ in range(4))
    mask = rng.choice(np.array([0, 0.25, 0.5, 0.75, 1, 0.3], dtype=np.float32), size=seq)
    sigma = np.float32(0.7356891)
    # The pipeline's case: a binary mask at 16x the latent grid (each value a sum of quarters, exact in float32).
    planes = [(64, 96, 4, 6), (256, 128, 16, 8), (16, 16, 1, 1), (80, 1024, 5, 64)]
    grids = [{"height": 3, "width": 5}, {"height": 2, "width": 2}, {"height": 4, "width": 1}]
    strengths = [[n, s] for n in (1, 2, 3, 4, 7, 10) for s in (0.0, 0.1, 0.25, 0.3, 0.5, 0.8, 0.99, 1.0)]
    for name, array in {"sample": sample, "noise": noise, "latents": latents, "proper": proper, "mask": mask}.items():
        (tmp_path / f"{name}.bin").write_bytes(array.tobytes())
    for i, (h, w, _, _) in enumerate(planes):
        (tmp_path / f"plane_{i}.bin").write_bytes((rng.random((h, w)) > 0.5).astype(np.float32).tobytes())
    (tmp_path / "cases.json").write_text(
        json.dumps(
            {"grids": grids, "strengths": strengths, "sigma": float(sigma), "channels": channels, "planes": planes}
        )
    )
    (tmp_path / "run.mjs").write_text(SCRIPT)
    result = subprocess.run(
        [
            str(find_node().node),
            str(tmp_path / "run.mjs"),
            (SRC / "latents.js").as_uri(),
            (SRC.parent / "shared" / "inpaint.js").as_uri(),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads((tmp_path / "out.json").read_text())

    def read(name: str) -> np.ndarray:
        return np.frombuffer((tmp_path / f"{name}.bin").read_bytes(), np.float32)

    latent_list = [torch.zeros(1, channels, g["height"], g["width"]) for g in grids]
    expected_ids = Flux2KleinPipeline._prepare_image_ids(latent_list)[0].numpy()
    assert np.array_equal(np.array(out["ids"]).reshape(-1, 4), expected_ids)

    s = torch.tensor([sigma])
    scaled = (s * torch.from_numpy(noise) + (1.0 - s) * torch.from_numpy(sample)).numpy()
    assert np.array_equal(read("scaled").reshape(seq, channels), scaled)

    m = torch.from_numpy(mask).view(1, seq, 1)
    blended = ((1 - m) * torch.from_numpy(proper)[None] + m * torch.from_numpy(latents)[None])[0].numpy()
    assert np.array_equal(read("blended").reshape(seq, channels), blended)

    for i, (h, w, oh, ow) in enumerate(planes):
        plane = torch.from_numpy(read(f"plane_{i}").reshape(1, 1, h, w).copy())
        expected = torch.nn.functional.interpolate(plane, size=(oh, ow), mode="bilinear").numpy()[0, 0]
        assert np.array_equal(read(f"resized_{i}").reshape(oh, ow), expected), (h, w, oh, ow)

    scheduler = FlowMatchEulerDiscreteScheduler()
    for (n, strength), start in zip(strengths, out["starts"], strict=True):
        init = min(n * strength, n)
        t_start = int(max(n - init, 0))
        scheduler.timesteps = torch.arange(n, dtype=torch.float32)
        assert start == (t_start if n - t_start >= 1 else None), (n, strength)
