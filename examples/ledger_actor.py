"""A long-running ledger service: durable account actors under a supervising bank actor.

    python examples/ledger_actor.py demo      # the whole story, in about two seconds
    python examples/ledger_actor.py serve     # run the service (deposits forever)
    python examples/ledger_actor.py report    # restore the accounts, print their balances

`demo` starts `serve` in a child process, kills it with SIGKILL in the middle of
its work, then runs `report` in a new process: every deposit the dead service
had acknowledged is in the restored balances, once. Use ``--store`` for another
database (``postgresql://...`` works the same; the default is ``$TETHER_STORE``, else
``sqlite:///tether.db``) and ``--backend trio`` for trio. ``tether executions`` lists
the accounts' journals as executions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
from typing import Any

import anyio
from pydantic import BaseModel
from tether.runtime import Actor, ActorRef, Runtime, SupervisionStrategy
from tether.stores import open_store

ACCOUNTS = ("alice", "bob", "carol")


class Deposit(BaseModel):
    amount: int


class Balance(BaseModel):
    pass


class Account(BaseModel):
    balance: int = 0
    deposits: int = 0


class AccountActor(Actor[Account]):
    """One account. Durable: its state lives in the journal, one delta per message."""

    kind = "account"
    messages = (Deposit, Balance)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Deposit):
            self.state.balance += message.amount
            self.state.deposits += 1
        return self.state.model_dump()


class Bank(Actor):  # type: ignore[type-arg]
    """Supervises the accounts: a crashed account is restarted from its journal alone."""

    kind = "bank"
    supervision = SupervisionStrategy.ONE_FOR_ONE

    async def started(self) -> None:
        self.accounts = {}
        for name in ACCOUNTS:
            self.accounts[name] = await self.context.spawn(AccountActor, name, durable=True)

    async def receive(self, message: Any) -> Any:
        return self.accounts[message]


async def open_bank(rt: Runtime) -> ActorRef:
    """Start the bank. The leases of a service killed on this machine are taken over at once.

    A service still running somewhere holds them: `LeaseHeld` says who, and until when.
    """
    return await rt.spawn(Bank, "main")


async def serve(url: str) -> None:
    async with open_store(url) as store, Runtime(store) as rt:
        bank = await open_bank(rt)
        rng = random.Random()
        while True:
            name = rng.choice(ACCOUNTS)
            amount = rng.randint(1, 100)
            await (await bank.ask(name)).send(Deposit(amount=amount))
            # Printed only once the deposit is in the journal: this is the acknowledgement.
            print(json.dumps({"acked": name, "amount": amount}), flush=True)


async def report(url: str) -> None:
    async with open_store(url) as store, Runtime(store) as rt:
        bank = await open_bank(rt)
        balances = {name: await (await bank.ask(name)).ask(Balance()) for name in ACCOUNTS}
        print(json.dumps(balances), flush=True)


def demo(url: str, backend: str) -> int:
    me = [sys.executable, __file__, "--store", url, "--backend", backend]
    before = json.loads(subprocess.run([*me, "report"], capture_output=True, text=True,
                                       check=True).stdout.splitlines()[-1])
    print(f"1. balances before: { {n: b['balance'] for n, b in before.items()} }")
    acked = dict.fromkeys(ACCOUNTS, 0)
    acked_count = dict.fromkeys(ACCOUNTS, 0)
    def count(line: str) -> None:
        event = json.loads(line)
        acked[event["acked"]] += event["amount"]
        acked_count[event["acked"]] += 1

    with subprocess.Popen([*me, "serve"], stdout=subprocess.PIPE, text=True) as service:
        assert service.stdout is not None
        for seen, line in enumerate(service.stdout, 1):
            count(line)
            if seen == 200:
                service.send_signal(signal.SIGKILL)
                break
        # Acknowledgements it wrote before it died, not yet read here, count too: they were given.
        for line in service.communicate()[0].splitlines():
            if line.strip():
                count(line)
    print(f"2. the service was killed with SIGKILL after {sum(acked_count.values())} acknowledged deposits: {acked}")
    after = json.loads(subprocess.run([*me, "report"], capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1])
    print(f"3. a new process restored the accounts: { {n: b['balance'] for n, b in after.items()} }")
    in_flight = 0
    for name in ACCOUNTS:
        gained = after[name]["balance"] - before[name]["balance"]
        applied = after[name]["deposits"] - before[name]["deposits"]
        # The one deposit journaled but not yet acknowledged when the process died (if
        # any) is kept too, and handled by the new process.
        extra = applied - acked_count[name]
        if gained < acked[name] or extra not in (0, 1):
            print(f"WRONG: {name} gained {gained} in {applied} deposits; "
                  f"{acked[name]} in {acked_count[name]} were acknowledged")
            return 1
        in_flight += extra
    if in_flight > 1:
        print(f"WRONG: {in_flight} unacknowledged deposits were applied; one sender has at most one")
        return 1
    print("4. every acknowledged deposit survived, none twice")
    return 0


def main() -> int:
    """Run the command the arguments name."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("demo", "serve", "report"))
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", "sqlite:///tether.db"))
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args()
    if args.command == "demo":
        return demo(args.store, args.backend)
    anyio.run(serve if args.command == "serve" else report, args.store, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
