"""The I/O benchmark's remote service: answers every HTTP request after 100 ms.

A minimal asyncio HTTP/1.1 server with keep-alive, in its own process, able to
hold thousands of open requests (each waits on the loop, not a thread)::

    python -m bench.io_server --port 8765 [--delay 0.1]
"""

from __future__ import annotations

import argparse
import asyncio

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 delay: float) -> None:
    try:
        while await reader.readline():  # request line; b"" when the client closed
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # headers: GET requests carry no body
            await asyncio.sleep(delay)
            writer.write(RESPONSE)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(port: int, delay: float) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, delay), "127.0.0.1", port,
                                        backlog=8192)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.1)
    opts = parser.parse_args()
    asyncio.run(serve(opts.port, opts.delay))


if __name__ == "__main__":
    main()
