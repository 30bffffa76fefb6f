"""A rollout step next to pods a stopped kube-controller-manager has not removed yet
(drill D6, run 8 of session 5): the old cell's decode asked 0 while its one decode pod
is still Ready. The controller-manager, once resumed, may still remove that pod even
if this tick asks decode 1 again (it replays the Deployment's 1 -> 0 -> 1 from its
watch), so no old-cell prefill may start next to it."""

from __future__ import annotations

from pdscaler import manifests, rollout
from support.rollout_world import IMAGE, Cell, Cluster, Pool, rev, spec_for


def _end_of_rollout(v1_decode: Pool) -> Cluster:
    """D6's cells at 20:34:27: v2 at 2 / 2 all Ready; v1 prefill gone, v1 decode
    ``v1_decode``; 1 GPU per replica, maxSurgeGPUs 2."""
    spec = spec_for("v2", rollout={"maxSurgeGPUs": 2})
    c = Cluster.serving(spec_for("v1"), "v1", 2, 2)
    c.spec = spec
    v1 = c.cells[rev("v1")]
    v1.prefill, v1.decode = Pool(0, 0, 0), v1_decode
    v2 = Cell(rev("v2", spec), "v2", IMAGE, 10.0, Pool(2, 2), Pool(2, 2), manifests.kv_config(spec))
    c.cells[v2.rev] = v2
    return c


def _sizes(c: Cluster, required: tuple[int, int]) -> dict[str, tuple[int, int]]:
    step = rollout.step(c.spec, c.views(), required, c.now, c.state)
    return {p.version: (p.replicas.prefill, p.replicas.decode) for p in step.cells}


def test_no_old_prefill_next_to_a_decode_pod_asked_away() -> None:
    """The policy raises prefill 2 -> 3 (as at 20:34:27): cap 3 + 2 + 2 = 7 GPUs,
    v1 holds its lingering decode pod (1), v2 level 3 (3 prefill + ceil(2 * 3 / 3) = 2
    decode = 5) fits: v2 takes the third prefill; v1 (decode 0 asked, 1 Ready) gets
    none and keeps decode 0. The operator of run 8 asked v1 1 / 1 here, and the
    resumed controller-manager removed the lingering decode pod before a new one was
    Ready while the new v1 prefill pod was: 0.24 s of Ready v1 prefill without Ready
    v1 decode."""
    assert _sizes(_end_of_rollout(Pool(0, 1, 0)), (3, 2)) == {"v2": (3, 2), "v1": (0, 0)}


def test_old_prefill_still_grows_next_to_a_decode_pod_it_keeps() -> None:
    """The same step when v1's decode Deployment still asks 1 for its Ready pod: v1 may
    serve the third prefill (its Ready decode pod stays), 1 / 1; v2 grows to 3 too."""
    assert _sizes(_end_of_rollout(Pool(1, 1, 0)), (3, 2)) == {"v2": (3, 2), "v1": (1, 1)}
