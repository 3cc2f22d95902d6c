"""One look at the Hub every `poll_interval`, and what follows it: which servers run (with the
profile each runs by the site's rule), stale and stopped marks, the meter, the node's GPU
activity, culling, the budget hold, and the pages kept ready."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tornado.httpclient import HTTPClientError

from jupyter_costguard.hub.cull import judged_row
from jupyter_costguard.hub.hubapi import RunningServer
from jupyter_costguard.hub.nodegpu import NodeGpuError, pod_name
from jupyter_costguard.hub.storerows import ServerRow, with_node_activity

if TYPE_CHECKING:
    from jupyter_costguard.hub.context import CycleContext


@dataclass
class Cycle:
    """What one look at the Hub found."""

    time: float
    running: dict[tuple[str, str], RunningServer] = field(default_factory=dict)
    memberships: dict[str, list[str]] = field(default_factory=dict)
    reporting: int = 0
    seconds: float = 0.0
    #: why the node's GPU activity could not be read this cycle ("" when it was, or is off)
    node_error: str = ""


class Poller:
    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        #: the last look at the Hub (None before the first)
        self.last: Cycle | None = None

    async def poll_once(self) -> Cycle:
        """Ask the Hub what runs; mark silent servers stale and stopped ones stopped; cull."""
        started = time.monotonic()
        cycle = Cycle(time=time.time())
        running, cycle.memberships = await self.ctx.hub.running_servers()
        # every step over all the servers runs on the worker, in one trip each: at 10,000
        # servers each is tens of milliseconds the IO loop would not answer in
        cycle.running = await self.ctx.run(self.record, running, cycle.memberships, cycle.time)
        self.ctx.running = dict(cycle.running)
        if self.ctx.node is not None:
            await self.read_node(cycle)
        rows, judged = await self.ctx.run(self.rows, cycle, self.ctx.culler is not None)
        cycle.reporting = sum(1 for r in rows if r.state == "ok")
        if self.ctx.culler is not None:
            await self.ctx.culler.run(judged, cycle.memberships, time.time())
        if self.ctx.budget_hold is not None:
            await self.hold_budgets(rows, cycle.memberships)
        cycle.seconds = time.monotonic() - started
        self.last = cycle
        self.ctx.refresh_pages()
        self.ctx.log.info("costguard-hub: %d servers running, %d reporting (%.2f s)",
                          len(cycle.running), cycle.reporting, cycle.seconds)
        return cycle

    def record(self, listed: Mapping[tuple[str, str], RunningServer],
               memberships: Mapping[str, list[str]], now: float,
               ) -> dict[tuple[str, str], RunningServer]:
        """Worker thread: what the Hub listed, each server with the profile it runs by the
        site's rule, recorded (stale and stopped marks, memberships, the meter)."""
        ctx = self.ctx
        running = {k: ctx.as_run(s) for k, s in listed.items()}
        ctx.store.record_cycle({k: (s.url, s.profile) for k, s in running.items()},
                               memberships, now, ctx.stale_after)
        rates = ctx.site.rates({s.profile for s in running.values()})
        if rates:
            ctx.store.record_meter({k: (s.started, s.profile) for k, s in running.items()},
                                   rates, now)
        return running

    def rows(self, cycle: Cycle, judge: bool) -> tuple[list[ServerRow], list[ServerRow]]:
        """Worker thread: the running servers' rows (their GPU activity from the node where
        it is read), and when culling, the same rows as the arbiter hook reads them too
        (`judged_row`): the same inputs."""
        ctx = self.ctx
        rows = [r for r in ctx.store.servers() if (r.user, r.server) in cycle.running]
        if ctx.node is not None:
            rows = [with_node_activity(r, cycle.time, ctx.fresh) for r in rows]
        judged = [judged_row(r, ctx.site, cycle.time, ctx.fresh) for r in rows] if judge \
            else []
        return rows, judged

    async def hold_budgets(self, rows: list[Any], groups: Mapping[str, list[str]]) -> None:
        """The budgets of the users with a running GPU server (`groups`: each user's groups
        as the Hub listed them this cycle), by the counted figure (on the worker), then the
        budget hold's round."""
        assert self.ctx.budget_hold is not None
        now = time.time()
        users = sorted({r.user for r in rows if self.ctx.site.of(r.profile).gpu
                        and (r.user, r.server) not in self.ctx.budget_hold.stopped})
        if not users:
            return
        starting = {k for k, s in self.ctx.running.items() if not s.ready}
        states = await self.ctx.run(self.ctx.store.budget_states, self.ctx.budgets,
                                    {u: groups.get(u, []) for u in users}, now)
        await self.ctx.budget_hold.run(rows, states, now, starting)

    async def read_node(self, cycle: Cycle) -> None:
        """The node's GPU activity of every running server's pod, recorded (a pod without
        GPU series holds none). When Prometheus cannot answer, nothing is recorded: the last
        readings age out and culling defers; the failure is logged."""
        assert self.ctx.node is not None
        pods: dict[tuple[str, str], tuple[str, str]] = {}
        for key in cycle.running:
            try:
                pods[key] = (self.ctx.pod_namespace, pod_name(
                    self.ctx.pod_name_template, key[0], key[1], namespace=self.ctx.pod_namespace,
                    slug_scheme=self.ctx.pod_slug_scheme))
            except ValueError as e:
                self.ctx.log.warning("costguard-hub: no pod name for %s/%s: %s", *key, e)
        try:
            found = await self.ctx.node.read(pods.values())
        except NodeGpuError as e:
            cycle.node_error = str(e)
            self.ctx.log.warning("costguard-hub: the node's GPU activity: %s", e)
            return
        readings = {}
        for key, pod in pods.items():
            g = found.get(pod)
            readings[key] = (0, 0, 0) if g is None else (g.gpus, g.busy, g.unknown)
        await self.ctx.run(self.ctx.store.record_node, readings, cycle.time,
                       max(300.0, 3 * self.ctx.poll_interval))

    async def poll_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except (OSError, HTTPClientError) as e:  # the Hub restarting: next round
                self.ctx.log.warning("costguard-hub: asking the Hub which servers run: %s", e)
            except Exception:
                self.ctx.log.exception("costguard-hub: asking the Hub failed")
            await asyncio.sleep(max(0.5, self.ctx.poll_interval - (time.monotonic() - started)))
