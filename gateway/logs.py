"""JSON log lines: one object per line, on stdout, for log shippers.

A record whose message is a dict is merged into the line as fields; anything else
becomes ``message``. Nothing here ever sees request bodies or headers.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if isinstance(record.msg, dict):
            line.update(record.msg)
        else:
            line["message"] = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_info[0].__name__  # the type only: texts can quote input
        return json.dumps(line, separators=(",", ":"), default=str)


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's own access log would duplicate ours without the contract fields.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
