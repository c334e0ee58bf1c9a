"""Set up a Prefect server for agents: the work pools, and the automation that crashes lost stages.

    python flows/agents_setup.py [--pool cpu --pool gpu] [--heartbeat-timeout-s 90]   (`make pools`)

A stage whose worker machine dies stays RUNNING in Prefect's API: nothing is left
to report its end. Flow runs started by ``make worker`` send a heartbeat every 30 s
(``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``); the automation created here marks a flow
run Crashed when its heartbeats stop for ``--heartbeat-timeout-s``. The study flow
then sees the crash and retries the stage on another worker, which resumes from the
stage's checkpoint where that checkpoint is reachable.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from prefect import get_client
from prefect.automations import Automation
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.exceptions import ObjectAlreadyExists

ZOMBIE_AUTOMATION = "aligntrain: crash flow runs that stopped sending heartbeats"
FINAL_EVENTS = {f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")}


def create_pools(pools: list[str]) -> None:
    with get_client(sync_client=True) as client:
        for name in pools:
            try:
                client.create_work_pool(WorkPoolCreate(name=name, type="process"))
                print(f"work pool {name!r} created")
            except ObjectAlreadyExists:
                print(f"work pool {name!r} exists")


def create_zombie_automation(timeout_s: float) -> Automation:
    with get_client(sync_client=True) as client:
        for old in client.read_automations_by_name(ZOMBIE_AUTOMATION):
            client.delete_automation(old.id)
    return Automation(
        name=ZOMBIE_AUTOMATION,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *FINAL_EVENTS},
            match={"prefect.resource.id": ["prefect.flow-run.*"]},
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=timeout_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED, message=f"no heartbeat for {timeout_s:.0f} s: the worker running it was lost"
            )
        ],
    ).create()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", action="append", help="work pool to create (repeat; default: cpu and gpu)")
    parser.add_argument("--heartbeat-timeout-s", type=float, default=90.0)
    args = parser.parse_args(argv)
    create_pools(args.pool or ["cpu", "gpu"])
    create_zombie_automation(args.heartbeat_timeout_s)
    print(f"automation {ZOMBIE_AUTOMATION!r}: crash after {args.heartbeat_timeout_s:.0f} s without a heartbeat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
