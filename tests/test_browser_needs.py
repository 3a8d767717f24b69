"""shared/browser_needs.js decides which image sizes fit an adapter from the converter's attention split: its model
figures must be the ones builder/convert/attention.py gives the full-size model's most-split graphs."""

from __future__ import annotations

import json
import subprocess

from builder import WEB_SRC
from builder.convert import attention
from builder.node import find_node

BROWSER_NEEDS_JS = WEB_SRC / "src" / "shared" / "browser_needs.js"
# FLUX.2 [klein] 4B: 24 attention heads in the transformer, one in the VAE's mid-block; the text encoder's vocabulary
# and width give its token embedding, which convert stores at 4 bits a value (GatherBlockQuantized's packed data).
TRANSFORMER_HEADS = 24


def test_the_decision_uses_the_converters_query_blocks_and_budget() -> None:
    script = (
        f"import {{ FULL_SIZE_MODEL }} from {json.dumps(BROWSER_NEEDS_JS.as_uri())};"
        "console.log(JSON.stringify(FULL_SIZE_MODEL));"
    )
    result = subprocess.run(
        [str(find_node().node), "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)
    transformer_blocks = attention.size_classes("transformer", heads=TRANSFORMER_HEADS)[0][0]
    vae_blocks = attention.query_blocks_for(heads=1, tokens=attention.max_attention_tokens("vae_decoder"))
    assert model == {
        "tokenEmbeddingBytes": 151936 * 2560 // 2,
        "transformerHeads": TRANSFORMER_HEADS,
        "transformerQueryBlocks": transformer_blocks,
        "vaeQueryBlocks": vae_blocks,
    }
