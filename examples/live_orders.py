"""An order that lives for days: it waits for the customer, has a deadline, and can be cancelled from anywhere.

    python examples/live_orders.py                # order-1 reserves the stock, then waits for the customer
    tether send order-1 --set confirmed=true --set by=customer --app examples.live_orders:runners
    python examples/live_orders.py --continue     # carries the confirmed order on: it ships (a slow carrier)
    tether cancel order-1 --reason "changed mind" # another terminal, while it ships: it stops at once
    tether show order-1                           # the journal: who confirmed, who cancelled, and why

The wait for the customer is durable: the first command returns (``paused``)
and no process needs to run while the customer makes up their mind. The
message may come from any process (here ``tether send``; in an application,
``send_message``), and it is checked against what the order waits for before
it is accepted. The order has a deadline of a week (``timeout=``): past it,
it ends ``timed_out`` wherever it stands. The stock is reserved exactly once,
however often the run is taken up again.

The store is ``$TETHER_STORE``, else ``sqlite:///tether.db``; ``--store`` picks
another, ``--backend trio`` runs it on trio. ``--carrier-seconds`` is how long
the carrier takes (long enough to cancel it by hand: 60 by default).
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from typing import Any

import anyio
from pydantic import BaseModel
from tether.actors import Chain
from tether.runtime import idempotent, wait_for
from tether.stores import open_store

DEFAULT_STORE = "sqlite:///tether.db"
CARRIER_SECONDS = float(os.environ.get("ORDER_CARRIER_SECONDS", "60"))


class Confirmation(BaseModel):
    """What the customer sends: yes or no, and who they are."""

    confirmed: bool
    by: str


@idempotent
async def reserve_stock(sku: str, quantity: int) -> str:
    print(f"reserved {quantity} x {sku}", flush=True)  # once, however often the run is taken up
    return f"reservation-{sku}-{quantity}"


async def reserve(state: dict[str, Any]) -> dict[str, Any]:
    return {"reservation": await reserve_stock(state["sku"], state["quantity"])}


async def await_customer(state: dict[str, Any]) -> dict[str, Any]:
    confirmation = await wait_for(Confirmation)  # parks the order until the customer answers
    assert confirmation is not None
    return {"confirmed": confirmation.confirmed, "confirmed_by": confirmation.by}


async def ship(state: dict[str, Any]) -> dict[str, Any]:
    if not state["confirmed"]:
        return {"shipped": False}
    print("shipping: the carrier is on its way (cancel it now: tether cancel order-1)", flush=True)
    await anyio.sleep(CARRIER_SECONDS)  # a cancel cuts the carrier call here
    return {"shipped": True}


order = Chain("order", [reserve, await_customer, ship])
runners = [order]


async def main(store_url: str, carry_on: bool) -> None:
    async with open_store(store_url) as store:
        order.store = store
        if carry_on:
            result = await order.resume("order-1")
        else:
            result = await order.run({"sku": "kettle", "quantity": 2}, execution_id="order-1",
                                     timeout=timedelta(days=7))
    if result.status == "paused":
        print("waiting for the customer; confirm with:\n"
              "  tether send order-1 --set confirmed=true --set by=customer --app examples.live_orders:runners\n"
              "then carry it on with: python examples/live_orders.py --continue")
    elif result.status == "completed":
        print(f"completed: {result.output}")
    else:
        print(f"{result.status}: {result.error}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--continue", dest="carry_on", action="store_true",
                        help="carry the order on once the customer answered")
    parser.add_argument("--carrier-seconds", type=float, default=None, help="how long the carrier takes")
    args = parser.parse_args()
    if args.carrier_seconds is not None:
        CARRIER_SECONDS = args.carrier_seconds
    anyio.run(main, args.store, args.carry_on, backend=args.backend)
