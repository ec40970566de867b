"""A job, one row to measure, and the one runner that sweep and report measure jobs with: each
job's rows are saved the moment it finishes, so an interruption loses at most the row under way."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from specbench.measure.bench import RunConfig
from specbench.model.checkpoints import tokenizer
from specbench.results import export
from specbench.results.rows import peer_row, result_row


@dataclasses.dataclass(frozen=True)
class Job:
    """One row to measure: the benchmark's config and the labels its row carries."""

    config: RunConfig
    draft_name: str
    prompt_id: str
    ids: list[str]  # the batch's prompt ids (one for B = 1)
    texts: list[str]
    encoded: list[list[int]]
    category: str | None = None  # the prompt's category in its suite; "all" for a batch of the suite

    def row(self, res, dtype: str) -> dict:
        from specbench.measure import device

        B = len(self.ids)
        return result_row(
            res,
            draft=self.draft_name,
            dtype=dtype,
            prompt_id=self.prompt_id,
            category=self.category,
            prompt=self.texts if B > 1 else self.texts[0],
            context=device.context(),
            decode=tokenizer.for_model(self.config.target).decode,
            batch_prompt_ids=self.ids,
        )

    def rows(self, res, dtype: str) -> list[dict]:
        """specbench's row, then one row per peer (peer_row), with where a peer's T = 0
        tokens leave specbench's."""
        from specbench.measure import peers

        row = self.row(res, dtype)
        out = [row]
        for p in res.peers:
            notes = [
                peers.difference_note(
                    self.config.target, self.encoded[0], res.ar_tokens, tokens, f"{p.name} {method}"
                )
                for method, tokens in (("AR", p.ar_tokens), ("SD", p.sd_tokens))
            ]
            note = "; ".join(n for n in notes if n) if row["temperature"] == 0 else None
            out.append(peer_row(row, p, tokenizer.for_model(self.config.target).decode, note or None))
        return out


def measure_into(
    job: Job, rows: list[dict], files: dict[str, str], dtype: str, key: Callable, tag: dict | None = None
) -> None:
    """Measure one job (bench.run_benchmark) and append its rows to `rows`, each with `tag`, leaving
    out those whose `key` a row already has (with --resume, a sweep's cell may lack only a peer's
    row); then rewrite every file in `files` ({format: path}) with all the rows at once."""
    from specbench.measure import bench

    measured = [{**r, **(tag or {})} for r in job.rows(bench.run_benchmark(job.config, job.encoded), dtype)]
    done = {key(r) for r in rows}
    rows += [r for r in measured if key(r) not in done]
    export.write_all(rows, files)
