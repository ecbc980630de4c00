"""What each engine iteration costs, by its kind (draft width, draft proposed), as the engine
itself times them for its width policy; a runner is :mod:`.timing`'s."""
import statistics

from tabulate import tabulate


def iteration_intervals(runner, passes=2):
    """What each engine iteration cost, by its kind: ``{(width, asked): [seconds, ...]}`` over
    ``passes`` passes of the runner's timed batches, as the engine itself times them for its width
    policy (``iteration_cost``: from one host synchronisation to the next, process CPU time on a
    CPU; ``width``: draft slots scored, ``asked``: a draft proposed inside the interval).  The
    policy's ``timed`` is wrapped for the passes only.  None for a generator that is not the engine."""
    policies = [getattr(runner.generator, "policy", None)] + list(getattr(runner.generator, "policies", {}).values())
    policies = [p for p in policies if p is not None]
    if not policies:
        return None
    seen = {}

    def recorder(timed):
        def record(width, asked, seconds):
            seen.setdefault((width, bool(asked)), []).append(seconds)
            return timed(width, asked, seconds)
        return record

    for policy in policies:
        policy.timed = recorder(policy.timed)
    try:
        for _ in range(passes):
            runner.decode(runner.timed_batches)
        runner.sync()
    finally:
        for policy in policies:
            del policy.timed
    return seen


def intervals_markdown(seen, unit=None):
    """Per kind of iteration: how many, median ms and, given ``unit`` (a plain engine step's
    seconds), the median in plain steps."""
    head = ["draft slots scored", "draft proposed", "iterations", "median ms"] + (["plain steps"] if unit else [])
    rows = []
    for (width, asked), times in sorted(seen.items()):
        med = statistics.median(times)
        rows.append([str(width), "yes" if asked else "no", str(len(times)), f"{med * 1e3:.3f}"]
                    + ([f"{med / unit:.2f}"] if unit else []))
    return tabulate(rows, headers=head, tablefmt="pipe", disable_numparse=True)
