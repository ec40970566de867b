"""The ten alternated pairs of issue 78's item 10, read from pairs.json.xz (pairs.sh made the rows):
each field's old (e061c5e, a static temperature) and new (traced) value, and new / old per pair."""

import json
import lzma
import statistics as st
from pathlib import Path

pairs = json.loads(lzma.open(Path(__file__).parent / "pairs.json.xz").read())
keys = ["speedup", "sd_residual_s", "ar_residual_s", "t_round_s", "t_target_s", "t_verify_s", "t_draft_s",
        "t_sd_start_s", "t_ar_token_s", "tokens_per_round", "n_rounds"]  # fmt: skip
for k in keys:
    old, new = [pairs[i]["old"][k] for i in pairs], [pairs[i]["new"][k] for i in pairs]
    ratio = [b / a for a, b in zip(old, new) if a]
    print(
        f"{k}: old median {st.median(old):.4g}, new median {st.median(new):.4g}, new/old per pair median "
        f"{st.median(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f}); new lower in "
        f"{sum(b < a for a, b in zip(old, new))}/{len(old)}"
    )
