"""The local results index: one SQLite row per run, safe under concurrent writers (WAL + busy timeout)."""
from __future__ import annotations

import os
import socket
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from recipe_zoo.core.errors import ZooError

COLUMNS = {  # name: SQL type; the first five are the TSV's leading columns
    "run_id": "TEXT PRIMARY KEY", "commit_id": "TEXT", "metric": "REAL", "memory_gb": "REAL", "status": "TEXT",
    "description": "TEXT", "recipe": "TEXT", "benchmark": "TEXT", "metric_name": "TEXT",
    "higher_is_better": "INTEGER", "seed": "INTEGER", "budget": "TEXT", "train_seconds": "REAL",
    "params_M": "REAL", "mfu_percent": "REAL", "hardware": "TEXT", "dirty": "INTEGER", "started": "TEXT",
    "finished": "TEXT", "run_dir": "TEXT", "pid": "INTEGER", "host": "TEXT",
}
TSV_HEAD = ["commit", "metric", "memory_gb", "status", "description"]


def connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        con.execute("PRAGMA busy_timeout = 60000")
        con.execute("PRAGMA journal_mode = WAL")
        cols = ", ".join(f"{k} {v}" for k, v in COLUMNS.items())
        con.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
        have = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
        for name in [c for c in COLUMNS if c not in have]:  # an index from before the column: added, rows kept
            con.execute(f"ALTER TABLE runs ADD COLUMN {name} {COLUMNS[name]}")
    except BaseException:
        con.close()  # a damaged index: leave no -wal or -shm of ours beside it when it is moved aside
        raise
    return con


def upsert(path: Path, row: dict) -> None:
    """Insert or update the run's row in one short immediate transaction; retried while locked."""
    row = {k: v for k, v in row.items() if k in COLUMNS}
    keys = list(row)
    sql = (f"INSERT INTO runs ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))}) "
           f"ON CONFLICT(run_id) DO UPDATE SET {', '.join(f'{k}=excluded.{k}' for k in keys if k != 'run_id')}")
    for attempt in range(20):
        try:
            with closing(connect(path)) as con:
                con.execute("BEGIN IMMEDIATE")
                con.execute(sql, [row[k] for k in keys])
                con.execute("COMMIT")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise unreadable(path, exc) from None
            if attempt == 19:
                raise ZooError(f"{path}: still locked by another writer after 20 tries ({exc}); run again") from None
            time.sleep(0.05 * (attempt + 1))
        except sqlite3.DatabaseError as exc:
            raise unreadable(path, exc) from None


def all_rows(path: Path) -> list[dict]:
    """Every run's row. A ``running`` row whose process (its pid on this host) is gone, killed by SIGKILL or the
    OOM killer before it could close its row, is ``killed``: so recorded, and so returned."""
    if not path.exists():
        return []
    try:
        with closing(connect(path)) as con:
            con.row_factory = sqlite3.Row
            rows = [dict(r) for r in con.execute("SELECT * FROM runs ORDER BY started, run_id")]
    except sqlite3.DatabaseError as exc:
        raise unreadable(path, exc) from None
    for row in rows:
        if row["status"] == "running" and row.get("pid") and row.get("host") == socket.gethostname() \
                and not _alive(row["pid"]):
            row["status"] = "killed"
            upsert(path, {"run_id": row["run_id"], "status": "killed"})
    return rows


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists here (a reused pid reads as alive: the row then stays running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process holds the pid
        return True
    return True


def unreadable(path: Path, exc: Exception) -> ZooError:
    """A damaged index (garbage, cut short, not a folder one can write) is the user's to move aside: it is never
    repaired or replaced here, as it may be the only list of older runs."""
    return ZooError(f"{path}: the results index cannot be read ({exc}); move it aside (mv {path} {path}.damaged): "
                    "a new one is started, and each run's folder keeps its summary.json")


def to_tsv(rows: list[dict]) -> str:
    rest = [c for c in COLUMNS if c not in ("commit_id", "metric", "memory_gb", "status", "description")]
    lines = ["\t".join(TSV_HEAD + rest)]
    for r in rows:
        values = [r.get("commit_id"), r.get("metric"), r.get("memory_gb"), r.get("status"), r.get("description")]
        values += [r.get(c) for c in rest]
        lines.append("\t".join("" if v is None else str(v).replace("\t", " ") for v in values))
    return "\n".join(lines) + "\n"
