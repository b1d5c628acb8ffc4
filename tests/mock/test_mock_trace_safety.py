"""The trace contract, held by recording the ttnn calls (trace capture itself segfaults on a mock cluster): a traced
call replays the semaphores and buffers captured once, so every call after the warm-up must

- hand its collectives the semaphore sets created before capture, alternating set by set from call to call (gather,
  barrier and fused semaphores alike: a set is never reused while the previous call may still signal it);
- write its gathers into the persistent buffers allocated at the warm-up, the same buffer every time;
- allocate nothing: no semaphore, no persistent buffer, no host->device upload of a weight or anything else;
- where a model's CCL object (tt-metal's TT_CCL) is given, use that object's own cycled handles, in the order it
  hands them out.

Each scenario builds its norm (recorded), runs one warm-up call (recorded) and then `CALLS` planned calls, each
recorded on its own, on mock T3000 and Galaxy meshes: `distributed_rms_norm` on the async and fused paths,
`DistributedRMSNorm` with and without an output gather, and tt-metal's RMSNorm / DistributedNorm through
`tt_rmsnorm.compat`."""

import pytest

from tt_rmsnorm.testing import workers

pytestmark = pytest.mark.mock_cluster

DIM = 8192
CALLS = 4
GATHER = "all_gather_async"
GATHER_ARGS = ("multi_device_global_semaphore", "barrier_semaphore")
FUSED = "fused_rms_minimal"
FUSED_ARG = "global_semaphore"
CYCLING = ("get_and_cycle_ag_semaphore_handles", "get_and_cycle_barrier_semaphore_handle")


def _axis(mesh):
    return 1 if tuple(mesh.shape)[0] > 1 else None


def _decode_memory_config(mesh, width):
    """The width-sharded L1 layout a decoder keeps its decode activations in (the fused path's input)."""
    import tt_rmsnorm

    grid = mesh.compute_with_storage_grid_size()
    n = tuple(mesh.shape)[1]
    plan = tt_rmsnorm.plan_distributed_rms_norm(
        (1, 1, 32, width // n), tuple(mesh.shape), cluster_axis=_axis(mesh), compute_grid=(grid.x, grid.y), sharded=True
    )
    return plan.norm.input_memory_config


def _activations(mesh, mode, count=2, width=DIM):
    import torch

    import tt_rmsnorm

    mc = _decode_memory_config(mesh, width) if mode == "decode" else None
    return [
        tt_rmsnorm.shard_activation(
            torch.randn(1, 1, 32 if mode == "decode" else 128, width), mesh, cluster_axis=_axis(mesh), memory_config=mc
        )
        for _ in range(count)
    ]


def _ccl(mesh, kind):
    """The CCL object a scenario passes: the package's CCLResources, or a model's own (tt-metal's TT_CCL)."""
    import tt_rmsnorm
    from tt_rmsnorm.testing.tt_metal_stand_ins import ModelCCL

    return ModelCCL(mesh) if kind == "model" else tt_rmsnorm.CCLResources(mesh, cluster_axis=_axis(mesh))


def _function(mesh, mode, kind, residual=False, both=False):
    """distributed_rms_norm with a CCL object; `both`: a plain and a residual call per step (two plans sharing one
    gathered-stats shape)."""
    import torch

    import tt_rmsnorm

    ccl = _ccl(mesh, kind)
    x, r = _activations(mesh, mode)
    w = tt_rmsnorm.prepare_weight(torch.randn(DIM), mesh, cluster_axis=_axis(mesh))
    kw = dict(epsilon=1e-5, cluster_axis=_axis(mesh), ccl=ccl)

    def step():
        if both or not residual:
            tt_rmsnorm.distributed_rms_norm(x, w, mesh, **kw)
        if both or residual:
            tt_rmsnorm.distributed_rms_norm(x, w, mesh, residual=r, **kw)

    return step, ccl


def _module(mesh, mode, kind, gather_output=False, residual=False):
    """DistributedRMSNorm; `kind` None: the module creates its own CCL resources."""
    import torch

    import tt_rmsnorm

    ccl = None if kind is None else _ccl(mesh, kind)
    out_mc = _decode_memory_config(mesh, DIM) if mode == "decode" else None
    norm = tt_rmsnorm.DistributedRMSNorm(
        mesh,
        DIM,
        {"norm.weight": torch.randn(DIM)},
        "norm",
        cluster_axis=_axis(mesh),
        ccl=ccl,
        gather_output=gather_output,
        output_memory_config=out_mc,
    )
    x, r = _activations(mesh, mode)

    def step():
        norm(x, mode, residual=r) if residual else norm(x, mode)

    return step, ccl


def _module_replicated(mesh, mode):
    """DistributedRMSNorm gathering over a 1x8 mesh's axis 0 (one device): plain rms_norm of full-width activations;
    at 8192 an interleaved input takes a TILE copy of the weight, loaded by the warm-up."""
    import torch

    import tt_rmsnorm

    norm = tt_rmsnorm.DistributedRMSNorm(mesh, DIM, {"norm.weight": torch.randn(DIM)}, "norm", cluster_axis=0)
    x = tt_rmsnorm.shard_activation(torch.randn(1, 1, 32 if mode == "decode" else 128, DIM), mesh, cluster_axis=0)
    return (lambda: norm(x, mode)), None


def _compat(mesh, mode, kind):
    """tt_transformers' decoder norm (compat.RMSNorm inside compat.DistributedNorm); `kind` None: the RMSNorm is
    given no tt_ccl and creates its own resources (the DistributedNorm around it keeps the model's for its gathers,
    so only the distributed prefill norm runs here, without the layer)."""
    import torch

    from tt_rmsnorm.compat import RMSNorm
    from tt_rmsnorm.testing import tt_metal_stand_ins

    tg = tuple(mesh.shape)[0] > 1
    if kind is None:
        norm = RMSNorm(mesh, DIM, {"n.weight": torch.randn(DIM)}, "n", is_distributed=lambda m: True)
        (x,) = _activations(mesh, mode, count=1)
        return (lambda: norm(x, mode)), None
    layer, _, _, tt_ccl = tt_metal_stand_ins.decoder_norm_module(mesh, tg)
    x = tt_metal_stand_ins.decoder_input(mesh, mode, tg)
    return (lambda: layer(x, mode)), tt_ccl


SCENARIOS = {  # scenario: (system, builder, its arguments)
    "function-async-prefill": ("t3k", _function, {"mode": "prefill", "kind": "package"}),
    "function-async-prefill-residual": ("t3k", _function, {"mode": "prefill", "kind": "package", "residual": True}),
    "function-fused-decode-residual": ("t3k", _function, {"mode": "decode", "kind": "package", "residual": True}),
    "function-two-plans-one-buffer": ("t3k", _function, {"mode": "prefill", "kind": "package", "both": True}),
    "function-galaxy-fused-decode": ("galaxy", _function, {"mode": "decode", "kind": "package"}),
    "function-model-ccl-async-prefill": ("t3k", _function, {"mode": "prefill", "kind": "model"}),
    "function-model-ccl-fused-decode": ("t3k", _function, {"mode": "decode", "kind": "model"}),
    "module-prefill-gathered": ("t3k", _module, {"mode": "prefill", "kind": "package", "gather_output": True}),
    "module-decode-gathered": (
        "t3k",
        _module,
        {"mode": "decode", "kind": "package", "gather_output": True, "residual": True},
    ),
    "module-own-ccl-prefill": ("t3k", _module, {"mode": "prefill", "kind": None, "residual": True}),
    "module-model-ccl-prefill-gathered": ("t3k", _module, {"mode": "prefill", "kind": "model", "gather_output": True}),
    "module-replicated-prefill": ("t3k", _module_replicated, {"mode": "prefill"}),
    "compat-prefill": ("t3k", _compat, {"mode": "prefill", "kind": "model"}),
    "compat-decode": ("t3k", _compat, {"mode": "decode", "kind": "model"}),
    "compat-own-ccl-prefill": ("t3k", _compat, {"mode": "prefill", "kind": None}),
    "compat-galaxy-decode": ("galaxy", _compat, {"mode": "decode", "kind": "model"}),
}


def _handing_out(model_ccl):
    """Wraps the model CCL object's cycling methods to list what it hands out, in order: (method, handle ids)."""
    handed = []
    for name in CYCLING:
        fn = getattr(model_ccl, name)

        def cycled(*args, _fn=fn, _name=name, **kwargs):
            handles = _fn(*args, **kwargs)
            handed.append((_name, tuple(id(h) for h in (handles if isinstance(handles, list) else [handles]))))
            return handles

        setattr(model_ccl, name, cycled)
    return handed


def _run(mesh, scenario):
    """Build (recorded), warm up (recorded), then CALLS planned calls, each recorded on its own."""
    from tt_rmsnorm.testing.recorder import recording

    _, build, args = SCENARIOS[scenario]
    with recording() as built:
        step, ccl = build(mesh, **args)
    model = ccl if ccl is not None and hasattr(ccl, CYCLING[0]) else None
    handed = _handing_out(model) if model is not None else None
    model_semaphores = None
    if model is not None:
        model_semaphores = {id(s) for sets in (*model.ag, *model.barrier) for group in sets for s in _flat(group)}
    with recording() as warm:
        step()
    handed_by_warm_up = None if handed is None else len(handed)
    planned = []
    for _ in range(CALLS):
        with recording() as rec:
            step()
        planned.append(rec.calls)
    return {
        "built": built.calls,
        "warm": warm.calls,
        "planned": planned,
        "handed": handed,
        "handed_by_warm_up": handed_by_warm_up,
        "model_semaphores": model_semaphores,
    }


def _flat(group):
    return group if isinstance(group, list) else [group]


def _alternating(sets, what):
    """Consecutive calls use disjoint sets and every other call the same one: two sets, cycled."""
    assert len(sets) >= 3, f"{what}: {len(sets)} calls"
    for i, (a, b) in enumerate(zip(sets, sets[1:], strict=False)):
        assert not set(a) & set(b), f"{what}: calls {i} and {i + 1} share a semaphore"
    for i, (a, c) in enumerate(zip(sets, sets[2:], strict=False)):
        assert a == c, f"{what}: calls {i} and {i + 2} use different sets (more than two sets cycled)"


# scenario: (gathers with cycled semaphores, the fused op, the model CCL object given, persistent buffers handed)
EXPECT = {
    "function-async-prefill": (True, False, False, True),
    "function-async-prefill-residual": (True, False, False, True),
    "function-fused-decode-residual": (False, True, False, True),
    "function-two-plans-one-buffer": (True, False, False, True),
    "function-galaxy-fused-decode": (False, True, False, True),
    "function-model-ccl-async-prefill": (True, False, True, True),
    "function-model-ccl-fused-decode": (False, True, True, True),
    "module-prefill-gathered": (True, False, False, True),
    "module-decode-gathered": (True, True, False, True),
    "module-own-ccl-prefill": (True, False, False, True),
    "module-model-ccl-prefill-gathered": (True, False, True, True),
    "module-replicated-prefill": (False, False, False, False),
    "compat-prefill": (True, False, True, True),
    "compat-decode": (True, False, True, False),  # the input gather, then rms_norm of the full width
    "compat-own-ccl-prefill": (True, False, False, True),
    "compat-galaxy-decode": (False, True, True, True),
}


def _buffers(calls):
    """{(op, argument): [buffer identity per call]} of the persistent buffers handed to the ops."""
    found = {}
    for c in calls:
        for arg, ident in c.buffers.items():
            found.setdefault((c.op, arg), []).append(ident)
    return found


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_planned_calls_cycle_semaphores_reuse_buffers_and_allocate_nothing(scenario):
    got = workers.run_isolated(SCENARIOS[scenario][0], _run, scenario, timeout=600)
    gathers, fused, model, buffers = EXPECT[scenario]
    calls = [c for step in (got["warm"], *got["planned"]) for c in step]

    for i, step in enumerate(got["planned"]):
        assert [c.name for c in step if c.is_allocation] == [], f"planned call {i + 1} allocated"

    gather_calls = [c for c in calls if c.op == GATHER]
    fused_calls = [c for c in calls if c.op == FUSED]
    assert bool(gather_calls) == gathers and bool(fused_calls) == fused, [c.op for c in calls]
    if gathers:
        for arg in GATHER_ARGS:
            _alternating([c.semaphores[arg] for c in gather_calls], f"{GATHER} {arg}")
    if fused:
        _alternating([c.semaphores[FUSED_ARG] for c in fused_calls], f"{FUSED} {FUSED_ARG}")
    # every handle was created before the planned calls: at construction, or where a model's CCL object is adopted
    # by the warm-up call (the fused op's semaphores)
    created = {c.made for c in got["built"] + got["warm"] if c.name == "create_global_semaphore"}
    assert set().union(*(c.semaphore_ids for c in calls)) <= created

    if model:
        assert {i for c in gather_calls for i in c.semaphore_ids} <= got["model_semaphores"], "not the model's handles"
        # the object's own cycle: every planned gather takes the handles the object handed out for it, in order
        planned_gathers = [c for step in got["planned"] for c in step if c.op == GATHER]
        for method, arg in zip(CYCLING, GATHER_ARGS, strict=True):
            handed = [ids for name, ids in got["handed"][got["handed_by_warm_up"] :] if name == method]
            assert [c.semaphores[arg] for c in planned_gathers] == handed, method
    else:
        assert not any(c.name == "create_global_semaphore" for c in got["warm"]), "a semaphore made by the warm-up"

    # persistent buffers: allocated by the warm-up, the same one handed to every call
    warm_made = {c.made for c in got["warm"] if c.is_allocation}
    handed_buffers = _buffers(calls)
    assert bool(handed_buffers) == buffers, handed_buffers
    for (op, arg), idents in handed_buffers.items():
        assert len(set(idents)) == 1, f"{op} {arg}: {len(set(idents))} buffers over {len(idents)} calls"
        assert idents[0] in warm_made, f"{op} {arg}: not the buffer the warm-up allocated"
