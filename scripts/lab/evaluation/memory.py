"""Peak memory of a decode: the weights of every model a runner holds plus the peak of tensor
memory allocated above the level before the decode (CUDA's allocator statistics; on CPU the
allocator events torch's profiler records).  A runner holds ``models`` and a ``generator`` and
decodes ``timed_batches`` (see :mod:`.timing`)."""


MEMORY_BATCHES = 4  # peak memory over the timed batches with the longest sources (length-sorted order)


def _modules(roots, depth=3):
    """Every torch module reachable from ``roots`` through attributes, lists and dicts (a generator
    holds its models, an engine its drafter, a drafter its own model)."""
    import torch

    seen, found, frontier = set(), [], list(roots)
    for _ in range(depth + 1):
        nxt = []
        for obj in frontier:
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, torch.Tensor)):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.nn.Module):
                found.append(obj)
            elif isinstance(obj, (list, tuple, set)):
                nxt.extend(obj)
            elif isinstance(obj, dict):
                nxt.extend(obj.values())
            elif hasattr(obj, "__dict__") and not isinstance(obj, type):
                nxt.extend(vars(obj).values())
        frontier = nxt
    return found


def weight_bytes(runner):
    """Bytes of the parameters and buffers of every model the runner holds (shared storage once)."""
    seen, total = set(), 0
    for module in _modules([runner.models, runner.generator]):
        for t in list(module.parameters()) + list(module.buffers()):
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def cpu_peak_bytes(fn):
    """Peak of torch's CPU tensor memory while ``fn()`` runs, above its level at the start: the
    running sum, in time order, of the allocator's events recorded by the profiler (profile_memory)."""
    from torch.autograd import DeviceType, profiler

    with profiler.profile(profile_memory=True, record_shapes=False) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    level = peak = 0
    for _, nbytes in events:
        level += nbytes
        peak = max(peak, level)
    return peak


def peak_memory_mb(runner, device):
    """Weights + peak decode memory (MB) over the ``MEMORY_BATCHES`` longest-source timed batches;
    None for a backend whose memory torch does not see (CTranslate2)."""
    if not hasattr(runner, "models"):
        return None
    import torch

    batches = runner.timed_batches[-MEMORY_BATCHES:]
    if device == "cpu":
        extra = cpu_peak_bytes(lambda: runner.decode(batches))
    else:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        runner.decode(batches)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base
    return round((weight_bytes(runner) + extra) / 2 ** 20, 2)
