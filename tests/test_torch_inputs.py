"""The torch layer's inputs at their limits (issue 38, points 7, 10 and 11)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rankopt.torch  # noqa: E402
import rankopt.torch._host  # noqa: E402
import rankopt.torch._padded  # noqa: E402


@pytest.fixture(params=["cpu", "torch"])
def device(request):
    return request.param


def RankHingeLoss(*args, device="cpu", **kwargs):  # noqa: N802 - the layer, on a chosen backend
    return rankopt.torch.RankHingeLoss(*args, device=device, **kwargs)


def test_a_float16_hinge_beyond_float16s_range_is_returned_in_float32(device):
    scores = torch.tensor([-3e4, 3e4], dtype=torch.float16, requires_grad=True)
    value = RankHingeLoss("auc", device=device)(scores, torch.tensor([1, 0]))
    assert value.dtype == torch.float32 and value.item() == 120001.0
    value.backward()
    assert scores.grad.dtype == torch.float16
    np.testing.assert_array_equal(scores.grad.float().numpy(), [-2.0, 2.0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_sum_over_many_queries_stays_finite(dtype, device):
    scores = torch.tensor([[-300.0, 300.0]] * 70_000, dtype=dtype)
    labels = torch.tensor([[1, 0]] * 70_000)
    value = RankHingeLoss("auc", device=device, reduction="sum")(scores, labels)
    assert value.dtype == torch.float32 and torch.isfinite(value)
    assert value.item() == pytest.approx(70_000 * 1201.0, rel=1e-3)
    per_query = RankHingeLoss("auc", device=device, reduction="none")(scores, labels)
    assert per_query.dtype == torch.float32


def test_float32_and_float64_values_keep_the_scores_dtype(device):
    for dtype in (torch.float32, torch.float64):
        value = RankHingeLoss("ap", device=device)(torch.tensor([0.1, -0.2, 0.3], dtype=dtype), torch.tensor([1, 0, 0]))
        assert value.dtype == dtype


def test_masked_padding_is_never_read(device):
    scores = torch.tensor([[0.2, -0.1, float("-inf")], [0.3, 0.1, float("nan")]], requires_grad=True)
    labels = torch.tensor([[1, 0, -1], [1, 0, 7]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    value = RankHingeLoss("ndcg_graded", device=device, k=2)(scores, labels, mask=mask)
    reference = RankHingeLoss("ndcg_graded", device=device, k=2)(scores[:, :2].detach(), labels[:, :2])
    assert value.item() == pytest.approx(reference.item())
    value.backward()
    assert torch.all(scores.grad[:, 2] == 0) and torch.all(torch.isfinite(scores.grad))


@pytest.mark.parametrize("top", [4, 127, 128, 1000])
def test_masked_grades_of_any_size_give_the_unpadded_hinge(device, top):
    """A binary loss's kept labels go to the compiled kernel as int8 when they fit (0 … 127), as they are
    otherwise: the same hinge either way, the padding's labels never read."""
    rng = np.random.default_rng(top)
    scores = torch.tensor(rng.normal(size=(6, 9)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, top + 1, (6, 9)))
    labels[:, 0], labels[:, 1] = top, 0  # both classes in every row
    labels[:, 7:] = -5  # the padding
    mask = torch.zeros(6, 9, dtype=torch.bool)
    mask[:, :7] = True
    relevant_at = max(1, top // 2)
    layer = RankHingeLoss("ap", device=device, relevant_at=relevant_at, reduction="none")
    masked = layer(scores, labels, mask=mask)
    unpadded = layer(scores[:, :7].contiguous(), labels[:, :7].contiguous())
    torch.testing.assert_close(masked, unpadded, rtol=0, atol=0)


@pytest.mark.parametrize("loss", ["ap", "precision_at_k", "ndcg_graded", "pairwise"])
def test_padding_at_the_ends_of_rows_moves_by_the_offsets_alone(monkeypatch, loss):
    """Rows that keep their first places (a DataLoader's padding) are gathered and scattered without the mask
    (``gather_leading``, ``scatter_leading``): the same hinge and gradient, to the bit, as the mask's pass."""
    rng = np.random.default_rng(4)
    scores = torch.tensor(rng.normal(size=(40, 12)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 3, (40, 12)))
    lengths = rng.integers(0, 13, 40)
    mask = torch.from_numpy(np.arange(12)[None, :] < lengths[:, None])
    moved = []
    for name in ("gather_leading", "scatter_leading"):
        original = getattr(rankopt.torch._padded, name)
        monkeypatch.setattr(rankopt.torch._padded, name, lambda *a, f=original, n=name: moved.append(n) or f(*a))

    def hinge_and_gradient():
        leaf = scores.clone().requires_grad_(True)
        value = RankHingeLoss(loss, reduction="sum")(leaf, labels.clone(), mask=mask.clone())
        value.backward()
        return value.detach(), leaf.grad

    by_offsets = hinge_and_gradient()
    assert moved == ["gather_leading", "scatter_leading"]
    init = rankopt.torch._padded.Kept.__init__
    monkeypatch.setattr(rankopt.torch._padded.Kept, "__init__", lambda self, m, o=None, leading=False: init(self, m, o))
    moved.clear()
    by_mask = hinge_and_gradient()
    assert moved == []
    torch.testing.assert_close(by_offsets, by_mask, rtol=0, atol=0)


def test_a_padding_label_of_minus_one_does_not_turn_the_labels_binary(device):
    """All real labels 1 with padding −1 used to read as binary {−1, 1}: the rows had something to order."""
    scores = torch.tensor([[0.2, -0.1, 0.0], [0.3, 0.1, 0.0]])
    labels = torch.tensor([[1, 1, -1], [1, 1, -1]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    value = RankHingeLoss("ap", device=device, reduction="none")(scores, labels, mask=mask)
    np.testing.assert_array_equal(value.numpy(), [0.0, 0.0])  # one relevance level: nothing to order


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int64])
def test_labels_of_any_whole_number_dtype_are_read_without_warnings(dtype, device):
    scores = torch.tensor([0.1, -0.2, 0.3, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = RankHingeLoss("ndcg_graded", device=device)(scores, torch.tensor([2, 0, 1, 0]).to(dtype))
    reference = RankHingeLoss("ndcg_graded", device=device)(scores, torch.tensor([2, 0, 1, 0]))
    assert value.item() == reference.item()


def test_fractional_labels_are_refused_whatever_their_dtype(device):
    with pytest.raises(ValueError, match="expected"):
        RankHingeLoss("ndcg_graded", device=device)(
            torch.tensor([0.1, -0.2]), torch.tensor([1.5, 0.0], dtype=torch.bfloat16)
        )


def test_a_fixed_label_tensor_is_checked_and_prepared_once(monkeypatch):
    """A loop over one batch prepares its labels once; changing them in place, or new labels, prepare again."""
    import copy
    import pickle

    prepared = []
    real = rankopt.torch._host.prepare_hinges
    monkeypatch.setattr(rankopt.torch._host, "prepare_hinges", lambda *a, **k: prepared.append(1) or real(*a, **k))
    layer = rankopt.torch.RankHingeLoss("ndcg_graded", device="cpu")
    scores, labels = torch.tensor([[0.2, -0.1, 0.4], [0.3, 0.1, 0.0]]), torch.tensor([[2, 0, 1], [1, 0, 0]])
    first = layer(scores, labels)
    for _ in range(3):
        assert layer(scores + 0.1, labels).item() == pytest.approx(
            rankopt.torch.RankHingeLoss("ndcg_graded")(scores + 0.1, labels.clone()).item()
        )
    assert len(prepared) == 1 + 3  # the layer once, the fresh layers once each
    labels[1, 2] = 3  # in place: the version counter moves
    changed = layer(scores, labels)
    assert len(prepared) == 5 and changed.item() != first.item()
    layer(scores, labels.clone())
    assert len(prepared) == 6
    mask = torch.tensor([[True, True, False], [True, True, True]])
    layer(scores, labels, mask=mask)
    layer(scores, labels, mask=mask)
    assert len(prepared) == 7
    for twin in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert twin(scores, labels, mask=mask).item() == layer(scores, labels, mask=mask).item()


def test_two_forwards_before_one_backward_keep_their_own_gradients(device):
    """Output arrays are reused only when free: a second forward must not overwrite the first's gradient."""
    layer = rankopt.torch.RankHingeLoss("ap", device=device, reduction="sum")
    labels = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 0]])
    first = torch.tensor([[0.3, 0.1, -0.2, 0.5], [0.0, 0.2, 0.4, -0.1]], dtype=torch.float64, requires_grad=True)
    second = torch.tensor([[-0.3, 0.4, 0.2, 0.1], [0.5, -0.2, 0.1, 0.0]], dtype=torch.float64, requires_grad=True)
    (layer(first, labels) + layer(second, labels)).backward()
    for scores in (first, second):
        alone = scores.detach().clone().requires_grad_(True)
        rankopt.torch.RankHingeLoss("ap", device=device, reduction="sum")(alone, labels).backward()
        np.testing.assert_array_equal(scores.grad.numpy(), alone.grad.numpy())
    kept = first.grad.clone()
    layer(first.detach().requires_grad_(True), labels).backward()  # a later call: the old grad is untouched
    np.testing.assert_array_equal(first.grad.numpy(), kept.numpy())


def test_the_last_preparation_is_let_go_before_the_next_is_built():
    """A training loop's new labels: the last batch's prepared arrays are freed before the next are built, so
    that their memory is reused rather than the system's fresh pages (about 1 ms a step at 10⁴ × 100)."""
    import weakref
    from types import SimpleNamespace

    from rankopt.torch._host import PreparedBatch

    class Preparation:
        pass

    cache = PreparedBatch()
    config = SimpleNamespace(loss=SimpleNamespace(cache_key=lambda: "loss"), relevant_from=1)
    first_labels, second_labels = torch.zeros(2, 3), torch.ones(2, 3)
    first = weakref.ref(cache.get(first_labels, None, config, Preparation))
    seen = []
    cache.get(second_labels, None, config, lambda: seen.append(first() is None) or Preparation())
    assert seen == [True]
    assert cache.get(second_labels, None, config, lambda: 1 / 0) is not None  # the new one is kept


@pytest.mark.parametrize("device", ["cpu", "torch"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64])
def test_bool_and_unsigned_labels_are_taken_on_both_devices(device, dtype):
    """Issue 61, points 6 and 9: bool labels are 0/1 on both devices (as structured_hinge and RankSVM take them),
    and uint16/32/64 labels are taken on "torch" as on "cpu" (its reductions lacked those types)."""
    from rankopt.torch import RankHingeLoss

    scores = torch.tensor([[0.3, -0.2, 0.9, 0.1], [0.0, 0.5, -0.5, 0.2]], dtype=torch.float64)
    labels = torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1]])
    for loss in ("ap", "ndcg", "pairwise"):
        expected = RankHingeLoss(loss, device=device)(scores, labels)
        got = RankHingeLoss(loss, device=device)(scores, labels.to(dtype))
        assert float(got) == float(expected), (loss, dtype)


def test_uint64_labels_past_int64_are_refused_by_name():
    from rankopt.torch import RankHingeLoss

    labels = torch.tensor([[1, 0, 1]], dtype=torch.uint64)
    labels[0, 0] = torch.tensor(-1, dtype=torch.int64).view(torch.uint64)
    for device in ("cpu", "torch"):
        with pytest.raises(ValueError, match="that fit in 64-bit integers, got 18446744073709551615 instead"):
            RankHingeLoss("ap", device=device)(torch.zeros(1, 3, dtype=torch.float64), labels)


@pytest.mark.parametrize("n_threads", [0, -1, 2.5, "x", True])
def test_threads_are_checked_alike_on_every_device(n_threads):
    """Issue 61, point 15: device="torch" took any n_threads, where "cpu" refused them."""
    from rankopt.torch import MetricHingeLoss, RankHingeLoss, rank_hinge

    scores, labels = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[1, 0, 1]])
    for device in ("cpu", "torch"):
        message = "expected n_threads to be a positive integer or None"
        with pytest.raises(ValueError, match=message):
            RankHingeLoss("ap", n_threads=n_threads, device=device)
        with pytest.raises(ValueError, match=message):
            MetricHingeLoss("ap", n_threads=n_threads, device=device)
        with pytest.raises(ValueError, match=message):
            rank_hinge(scores, labels, loss="ap", n_threads=n_threads, device=device)


def test_a_keyword_no_one_takes_is_named_with_who_takes_what():
    """Issue 61, point 19: PML's keywords on the PML-free module, and a keyword a boosting objective does not
    take, were "TypeError: APLoss() takes no arguments"."""
    from rankopt.torch import MetricHingeLoss, RankHingeLoss

    for keyword in ("reducer", "distance", "embedding_regularizer", "collect_stats"):
        with pytest.raises(TypeError, match=f"PML's {keyword} instead: they belong to rankopt.pml.MetricHingeLoss"):
            MetricHingeLoss("ap", **{keyword: None})
    with pytest.raises(
        TypeError, match="got 'C' instead: keywords the call does not know go to the loss, which takes no"
    ):
        RankHingeLoss("ap", C=1)
    with pytest.raises(TypeError, match="got 'kk' instead: .* which takes k"):
        RankHingeLoss("precision_at_k", kk=3)
    pytest.importorskip("lightgbm")
    from rankopt.lightgbm import hinge_objective

    with pytest.raises(TypeError, match="got 'C' instead"):
        hinge_objective("ap", C=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_zero_embedding_keeps_the_gradient_finite(dtype):
    """Issue 61, point 4: a zero embedding's gradient was [inf, -inf, nan] under cosine similarity."""
    from rankopt.torch import MetricHingeLoss

    embeddings = torch.randn(4, 3, dtype=dtype, generator=torch.Generator().manual_seed(0))
    embeddings[0] = 0
    embeddings.requires_grad_()
    value = MetricHingeLoss("ap")(embeddings, torch.tensor([0, 1, 0, 1]))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(embeddings.grad).all()
    big = torch.full((3, 2), 1e20, dtype=torch.float32).requires_grad_()  # the overflow the scaling is for
    MetricHingeLoss("ap")(big * torch.tensor([[1.0, 2.0], [2.0, 1.0], [1.0, 1.0]]), torch.tensor([0, 1, 0])).backward()
    assert torch.isfinite(big.grad).all()


@pytest.mark.parametrize("device", ["cpu", "torch"])
def test_a_parameter_changed_in_place_is_read_at_the_next_call(device):
    """Issue 61, point 1: layer.loss_params["k"] = 1 was ignored (k = 3 kept) on both devices."""
    from rankopt.torch import RankHingeLoss

    scores = torch.tensor([[0.9, 0.8, 0.7, 0.1, 0.0]], dtype=torch.float64)
    labels = torch.tensor([[0, 1, 1, 0, 1]])
    layer = RankHingeLoss("precision_at_k", k=3, device=device)
    at_three = float(layer(scores, labels))
    layer.loss_params["k"] = 1
    at_one = float(layer(scores, labels))
    assert at_one == float(RankHingeLoss("precision_at_k", k=1, device=device)(scores, labels)) != at_three
    assert layer.rank_loss.k == 1


def test_every_torch_door_runs_under_inference_mode():
    """Issue 61, point 7: labels or masks made under torch.inference_mode (Lightning's validation loop) raised
    "Inference tensors do not track version counter" on "cpu", and both MetricHingeLoss classes failed."""
    from rankopt.torch import MetricHingeLoss, RankHingeLoss

    scores = torch.randn(2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    embeddings = torch.randn(6, 3, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 1, 0, 1, 2, 2])
    y = torch.tensor([[1, 0, 1, 0], [0, 1, 1, 0]])
    expected = {device: float(RankHingeLoss("ap", device=device)(scores, y)) for device in ("cpu", "torch")}
    metric_expected = float(MetricHingeLoss("ap")(embeddings, labels))
    layer = RankHingeLoss("ap", device="cpu")
    with torch.inference_mode():
        y_inference, mask = y.clone(), torch.ones(2, 4, dtype=torch.bool)
        for device in ("cpu", "torch"):
            assert float(RankHingeLoss("ap", device=device)(scores, y_inference, mask=mask)) == expected[device]
        assert float(layer(scores, y_inference)) == expected["cpu"]
        y_inference[0, 0] = 0  # changed in place, where no version counter says so: read again
        assert float(layer(scores, y_inference)) != expected["cpu"]
        assert float(MetricHingeLoss("ap")(embeddings, labels)) == metric_expected
    pml = pytest.importorskip("rankopt.pml")
    plain = float(pml.MetricHingeLoss("ap")(embeddings, labels))
    with torch.inference_mode():
        assert float(pml.MetricHingeLoss("ap")(embeddings, labels)) == plain


@pytest.mark.parametrize("loss, params", [("ndcg_graded", {"k": 3}), ("pairwise", {}), ("ap", {})])
@pytest.mark.parametrize("label", [float("nan"), float("inf"), 2.0**63, 1e300, 1.5])
def test_bad_float_labels_are_refused_on_the_tensor_device(loss, params, label):
    """Issue 61, point 5: NaN, inf and float labels >= 2**63 crashed the graded kernels on "torch" with an
    out-of-bounds index before the refusal; "cpu" refuses them with a ValueError."""
    from rankopt.torch import RankHingeLoss

    scores, labels = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[1.0, label, 0.0]])
    for device in ("cpu", "torch"):
        with pytest.raises(ValueError, match="expected y to hold integer relevance grades >= 0"):
            RankHingeLoss(loss, device=device, **params)(scores, labels)


@pytest.mark.parametrize(
    "dtype, big, width", [(torch.float64, 1e304, 100), (torch.float32, 1e34, 1000)], ids=["float64", "float32"]
)
def test_the_score_sum_bound_counts_the_kept_documents_on_both_devices(dtype, big, width):
    """Issue 61, point 14: the tensor device bounded the score sums by the padded width, refusing scores the host
    takes (two documents kept in a row of 100)."""
    from rankopt.torch import RankHingeLoss

    scores = torch.zeros(1, width, dtype=dtype)
    scores[0, :2] = torch.tensor([big, -big], dtype=dtype)
    labels = torch.zeros(1, width, dtype=torch.long)
    labels[0, 0] = 1
    mask = torch.zeros(1, width, dtype=torch.bool)
    mask[0, :2] = True
    values = {
        device: float(RankHingeLoss("ap", device=device)(scores, labels, mask=mask)) for device in ("cpu", "torch")
    }
    assert values["cpu"] == values["torch"] == 0.0
    mask[0, :] = True  # every document kept: the sums could overflow, both refuse
    for device in ("cpu", "torch"):
        with pytest.raises(ValueError, match="expected scores"):
            RankHingeLoss("ap", device=device)(scores, labels, mask=mask)
