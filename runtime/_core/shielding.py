"""`shielded()`: code that a cancel, a deadline or a step timeout lets reach its end."""

from __future__ import annotations

import anyio


def shielded() -> anyio.CancelScope:
    """Protect a block from cancellation: what it starts, it finishes.

    An execution that is cancelled (`tether.runtime.cancel`), that passes its
    deadline, or a step that overruns its ``timeout=``, stops the code it runs at
    its next ``await``. Code that must not be cut midway (a transfer and its
    record, two writes that belong together) declares it: the cancel waits for
    the block to end, then takes effect at the first ``await`` after it. Keep such
    blocks short; nothing can stop them, not even a process shutting down.

    Example:
        ```python
        @idempotent
        async def transfer(amount: int) -> str:
            with shielded():
                receipt = await bank.transfer(amount)
                await ledger.record(receipt)
            return receipt.id
        ```
    """
    return anyio.CancelScope(shield=True)
