"""The GPU card's state (measure/card.py), parsed from recorded nvidia-smi output: clocks, power,
temperature and the reasons the clocks are held; a row records both ends of the timed repeats,
and an SM clock that fell by more than 10% while timed is said in one line."""

import json
from pathlib import Path

from specbench.measure import card
from specbench.results import export

DATA = Path(__file__).resolve().parent / "data"


def test_recorded_nvidia_smi_lines_parse_into_each_card_s_state():
    (idle,) = card.parse((DATA / "nvidia-smi-h200.csv").read_text())
    assert idle == card.CardState(1980.0, 3201.0, 121.45, 38.0, ())
    hot, unknown = card.parse((DATA / "nvidia-smi-throttled.csv").read_text())
    assert hot.sm_mhz == 1590.0 and hot.reasons == ("software power cap", "software thermal slowdown")
    assert unknown.power_w is None and unknown.reasons == ("idle",)  # "[N/A]" is no number
    assert card.parse("NVIDIA-SMI has failed because it couldn't communicate with the driver") == []


def test_a_clock_that_fell_while_timed_is_said_and_a_steady_one_is_not():
    (start,) = card.parse((DATA / "nvidia-smi-h200.csv").read_text())
    hot, _ = card.parse((DATA / "nvidia-smi-throttled.csv").read_text())
    row = card.record(start, hot)
    assert row["card_sm_mhz_before"] == 1980.0 and row["card_reasons_after"] == [
        "software power cap",
        "software thermal slowdown",
    ]
    line = card.warning(row)
    assert "fell from 1980 to 1590 MHz" in line and "software power cap" in line  # 19.7% down
    assert card.warning(card.record(start, start)) is None
    steady = card.record(start, card.CardState(1800.0, 3201.0, 300.0, 60.0, ()))  # 9.1% down: within
    assert card.warning(steady) is None
    assert card.record(None, hot) == {} and card.warning({}) is None  # off a GPU: nothing


def test_a_row_with_the_card_s_state_is_strict_json():
    (start,) = card.parse((DATA / "nvidia-smi-h200.csv").read_text())
    _, unknown = card.parse((DATA / "nvidia-smi-throttled.csv").read_text())
    row = {"K": 4, **card.record(start, unknown)}
    assert json.loads(export.to_json([row]))[0]["card_power_w_after"] is None
