"""The compiled greedy kernel against its Python twin and the loss classes it mirrors."""

import numpy as np
import pytest

import rankopt
from rankopt.inference import _greedy
from rankopt.inference.greedy import GreedyMethod
from rankopt.losses import APLoss, AUCLoss, CompiledForm, KernelCode, NDCGLoss

RANK_LOSSES = ["ap", "ndcg", "auc"]


def _python_twin(loss_cls):
    """A copy of ``loss_cls`` without a compiled form: it runs on the Python path."""
    return type(
        f"Python{loss_cls.__name__}",
        (loss_cls,),
        {"name": f"{loss_cls.name}_python_test", "compiled_form": lambda self, n_pos, n_neg: None},
    )()


LOSS_CLASSES = {"ap": APLoss, "ndcg": NDCGLoss, "auc": AUCLoss}
# built once: losses compare equal by type, so one class per loss keeps any per-loss cache warm
PYTHON_TWINS = {name: type(_python_twin(cls)) for name, cls in LOSS_CLASSES.items()}


# --------------------------------------------------------------------------
# KernelCode <-> _loss.pxd


def test_kernel_codes_match_pxd_constants():
    assert _greedy.KERNEL_CODES == {code.name: code.value for code in KernelCode}


@pytest.mark.parametrize(
    "loss,code", [(APLoss(), KernelCode.AP), (AUCLoss(), KernelCode.AUC), (NDCGLoss(), KernelCode.POSITION_DISCOUNT)]
)
def test_builtin_losses_have_compiled_forms(loss, code):
    form = loss.compiled_form(3, 5)
    assert isinstance(form, CompiledForm)
    assert form.code is code
    assert int(form.code) == _greedy.KERNEL_CODES[code.name]


@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (3, 5), (6, 2), (10, 40)])
def test_position_discount_table_is_normalised_discount(n_pos, n_neg):
    table = NDCGLoss().compiled_form(n_pos, n_neg).table
    k = np.arange(1, n_pos + n_neg + 1)
    discount = 1.0 / np.log2(1.0 + k)
    np.testing.assert_allclose(table, discount / discount[:n_pos].sum(), rtol=1e-14)
    # the kernel's delta_diff, table[i + j - 1] - table[i + j - 2], is the loss's delta_diff
    loss = NDCGLoss()
    j, i = np.meshgrid(np.arange(1, n_neg + 1), np.arange(1, n_pos + 1), indexing="ij")
    kernel_diff = table[i + j - 1] - table[i + j - 2]
    np.testing.assert_allclose(kernel_diff, loss.delta_diff(j, i, n_pos, n_neg), rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------
# Compiled kernel == Python path


@pytest.mark.parametrize("name", RANK_LOSSES)
@pytest.mark.parametrize("n_pos,n_neg", [(1, 1), (1, 9), (9, 1), (5, 5), (12, 30), (40, 7), (25, 120)])
def test_python_path_matches_compiled_kernel(name, n_pos, n_neg):
    rng = np.random.default_rng(n_pos * 1000 + n_neg)
    compiled, python = LOSS_CLASSES[name](), PYTHON_TWINS[name]()
    assert python.compiled_form(n_pos, n_neg) is None
    for scale in (0.01, 0.3, 2.0):
        pos, neg = scale * rng.normal(size=n_pos), scale * rng.normal(size=n_neg)
        a = rankopt.most_violated_ranking(compiled, pos, neg, inference="greedy")
        b = rankopt.most_violated_ranking(python, pos, neg, inference="greedy")
        np.testing.assert_array_equal(a.neg_ranks, b.neg_ranks)
        np.testing.assert_array_equal(a.pos_ranks, b.pos_ranks)
        assert a.value == pytest.approx(b.value, abs=1e-12)
        assert a.loss == pytest.approx(b.loss, abs=1e-12)


@pytest.mark.parametrize("name", RANK_LOSSES)
def test_python_path_matches_compiled_kernel_on_ties(name):
    rng = np.random.default_rng(17)
    compiled, python = LOSS_CLASSES[name](), PYTHON_TWINS[name]()
    for _ in range(30):
        n_pos, n_neg = rng.integers(1, 12, size=2)
        pos = 0.05 * rng.integers(0, 4, size=n_pos)
        neg = 0.05 * rng.integers(0, 4, size=n_neg)
        a = rankopt.most_violated_ranking(compiled, pos, neg, inference="greedy")
        b = rankopt.most_violated_ranking(python, pos, neg, inference="greedy")
        assert a.value == pytest.approx(b.value, abs=1e-9)


@pytest.mark.parametrize("name", RANK_LOSSES)
def test_greedy_method_interleaving_ranks_are_non_decreasing_in_score_order(name):
    # Observation 4: ranks grow as the negative's score falls.
    rng = np.random.default_rng(23)
    method = GreedyMethod()
    for loss in (LOSS_CLASSES[name](), PYTHON_TWINS[name]()):
        pos, neg = rng.normal(size=15), rng.normal(size=60)
        ranks = method.interleaving_ranks(loss, pos, neg)
        assert ranks.shape == neg.shape and np.issubdtype(ranks.dtype, np.integer)
        assert np.all(np.diff(ranks[np.argsort(-neg, kind="stable")]) >= 0)


# --------------------------------------------------------------------------
# float32 / float64


@pytest.mark.parametrize("name", RANK_LOSSES)
@pytest.mark.parametrize("python_path", [False, True])
def test_float32_and_float64_inputs_agree(name, python_path):
    rng = np.random.default_rng(31)
    loss = PYTHON_TWINS[name]() if python_path else LOSS_CLASSES[name]()
    for n_pos, n_neg in [(1, 1), (4, 7), (20, 50)]:
        pos32 = (0.3 * rng.normal(size=n_pos)).astype(np.float32)
        neg32 = (0.3 * rng.normal(size=n_neg)).astype(np.float32)
        # the float64 copies hold exactly the same numbers
        a = rankopt.most_violated_ranking(loss, pos32, neg32, inference="greedy")
        b = rankopt.most_violated_ranking(loss, pos32.astype(np.float64), neg32.astype(np.float64), inference="greedy")
        mixed = rankopt.most_violated_ranking(loss, pos32, neg32.astype(np.float64), inference="greedy")
        for r in (a, mixed):
            np.testing.assert_array_equal(r.neg_ranks, b.neg_ranks)
            np.testing.assert_array_equal(r.pos_ranks, b.pos_ranks)
            assert r.value == pytest.approx(b.value, abs=1e-12)
            assert r.pos_coef.dtype == np.float64 and r.neg_coef.dtype == np.float64
        # float32 ties between classes stay ties
        tied = rankopt.most_violated_ranking(
            loss, np.float32([0.5, 0.25]), np.float32([0.5, 0.25, 0.5]), inference="greedy"
        )
        tied64 = rankopt.most_violated_ranking(loss, [0.5, 0.25], [0.5, 0.25, 0.5], inference="greedy")
        np.testing.assert_array_equal(tied.neg_ranks, tied64.neg_ranks)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16])
def test_other_numeric_dtypes_are_accepted(dtype):
    pos, neg = np.array([2, 0, 1], dtype=dtype), np.array([1, 3], dtype=dtype)
    a = rankopt.most_violated_ranking("ap", pos, neg, inference="greedy")
    b = rankopt.most_violated_ranking("ap", pos.astype(np.float64), neg.astype(np.float64), inference="greedy")
    np.testing.assert_array_equal(a.neg_ranks, b.neg_ranks)
    assert a.value == b.value


def test_non_contiguous_input():
    rng = np.random.default_rng(41)
    pos, neg = rng.normal(size=20)[::2], rng.normal(size=30)[::3]
    a = rankopt.most_violated_ranking("ndcg", pos, neg, inference="greedy")
    b = rankopt.most_violated_ranking("ndcg", pos.copy(), neg.copy(), inference="greedy")
    np.testing.assert_array_equal(a.neg_ranks, b.neg_ranks)
