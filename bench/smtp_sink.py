"""An SMTP server for the email drain (bench/post_office_drain.py): accepts every message and writes
its arrival time (Unix seconds) as a line of a file, so the bench times both senders the same way.

    python bench/smtp_sink.py PORT FILE     # serves 127.0.0.1:PORT until SIGTERM
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import Any

from aiosmtpd.smtp import SMTP


class Recorder:
    def __init__(self, path: str) -> None:
        self.out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the server's life

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.out.write(f"{time.time():.6f}\n")
        return "250 OK"


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    recorder = Recorder(path)
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(lambda: SMTP(recorder, hostname="bench-sink"), "127.0.0.1", port))
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()
        recorder.out.close()


if __name__ == "__main__":
    main()
