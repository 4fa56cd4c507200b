"""FSDP2 as torchtitan applies it, observed on two real gloo ranks: the root and the last block stay gathered after
forward, the prefetch chains include the root and the embedding, and the embedding and LM head are counted by the
model-state prediction to the byte."""

import json
import math

import pytest

from commbench.training.spec import ModelShape
from commbench.training.synthetic import count_params
from tests.rank_jobs import run_rank_job

pytestmark = pytest.mark.distributed
NPROC = 2
CONFIGS = [
    {"strategy": "zero3", "impl": "fsdp2", "reshard_after_forward": True, "forward_prefetch": 1,
     "backward_prefetch": "2", "wrap": "block"},
    {"strategy": "zero3", "impl": "fsdp2", "reshard_after_forward": True, "wrap": "model"},
]
SHAPE = ModelShape(kind="transformer", layers=3, hidden=72, heads=3, seq_len=8, vocab=100)  # as the job's


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> list[list[dict]]:
    folder = tmp_path_factory.mktemp("fsdp2_units")
    run_rank_job("fsdp2_units_job.py", NPROC, folder, json.dumps(CONFIGS), timeout=300,
                 outputs=[f"rank{rank}-{index}.json" for rank in range(NPROC) for index in range(len(CONFIGS))])
    return [[json.loads((folder / f"rank{rank}-{index}.json").read_text()) for rank in range(NPROC)]
            for index in range(len(CONFIGS))]


def test_the_root_and_the_last_block_stay_gathered_after_forward(observed):
    for result in observed[0]:
        assert result["gathered_after_forward"] == {"root": True, "embedding": False, "block0": False,
                                                    "block1": False, "block2": True}


def test_the_prefetch_chains_run_from_the_root_through_the_embedding(observed):
    for result in observed[0]:
        forward = {name: chain["forward"] for name, chain in result["prefetch"].items()}
        backward = {name: chain["backward"] for name, chain in result["prefetch"].items()}
        assert forward == {"root": ["embedding"], "embedding": ["block0"], "block0": ["block1"], "block1": ["block2"],
                           "block2": []}
        assert backward == {"root": ["block2", "block1"], "block2": ["block1", "block0"],
                            "block1": ["block0", "embedding"], "block0": ["embedding"], "embedding": []}


def test_one_unit_for_the_model_reshards_as_configured(observed):
    for result in observed[1]:
        assert result["gathered_after_forward"] == {"root": False}  # else reshard true and false would be one row


def test_the_embedding_and_head_are_counted_by_the_prediction_to_the_byte(observed):
    for per_rank in observed:
        for result in per_rank:
            shapes = result["shapes"]
            # token embedding first and LM head last, both vocab × hidden: what the parameter count formula adds
            assert shapes[0] == shapes[-1] == [SHAPE.vocab, SHAPE.hidden]
            assert sum(math.prod(shape) for shape in shapes) == count_params(SHAPE)
            assert result["state_bytes"] == result["predicted_bytes"]
