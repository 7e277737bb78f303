# Imported first by the Python flows: every error reply redis-py reads (blocking or asyncio) that says "not emulated"
# (raised, or returned among a pipeline's or a transaction's replies) is written to standard
# error, where the Rust test looks for it, even when the library catches it and goes on.
import sys

import redis.asyncio.connection
import redis.connection
import redis.exceptions

_read = redis.connection.AbstractConnection.read_response
_aread = redis.asyncio.connection.AbstractConnection.read_response


def _report(reply):
    if isinstance(reply, Exception) and "not emulated" in str(reply):
        print(f"the server refused: {reply}", file=sys.stderr, flush=True)
    elif isinstance(reply, list):
        for item in reply:
            _report(item)


def read_response(self, *args, **kwargs):
    try:
        reply = _read(self, *args, **kwargs)
    except redis.exceptions.ResponseError as e:
        _report(e)
        raise
    _report(reply)
    return reply


async def aread_response(self, *args, **kwargs):
    try:
        reply = await _aread(self, *args, **kwargs)
    except redis.exceptions.ResponseError as e:
        _report(e)
        raise
    _report(reply)
    return reply


redis.connection.AbstractConnection.read_response = read_response
redis.asyncio.connection.AbstractConnection.read_response = aread_response
