"""A real PostgreSQL hot standby of a `pgserver` primary, for the tests and benchmarks of reading from a standby.

It uses only what the `pgserver` package bundles: `pg_basebackup -R -X stream`
copies the primary and writes the standby's `primary_conninfo`, and `pg_ctl`
starts it on its own Unix socket, where it streams the primary's WAL and
replays it as a read-only hot standby (`pg_is_in_recovery()` is true; replay can
be paused with `pg_wal_replay_pause()`). As root, like pgserver, it runs
PostgreSQL as pgserver's system user.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path


class HotStandby:
    """A streaming-replication hot standby of `primary` (a running `pgserver.PostgresServer`), copied at once;
    `start` runs it. Every database on the primary is replayed on it."""

    PORT = 5433

    def __init__(self, primary):
        from pgserver._commands import POSTGRES_BIN_PATH

        self.bin = POSTGRES_BIN_PATH
        self.primary_socket = primary.get_postmaster_info().socket_dir
        self.user = primary.system_user  # PostgreSQL refuses to run as root: pgserver runs it as its own user
        self.home = Path(tempfile.mkdtemp(prefix="mnemosync-standby-"))
        self.data, self.socket = self.home / "data", self.home / "socket"
        self.data.mkdir(mode=0o700)
        self.socket.mkdir()
        self.socket.chmod(0o777)
        if self.user is not None:
            self.home.chmod(0o755)
            shutil.chown(self.data, self.user, self.user)
        self._run("pg_basebackup", "-h", str(self.primary_socket), "-U", "postgres", "-D", str(self.data),
                  "-R", "-X", "stream", "-c", "fast")

    def _run(self, program: str, *args: str) -> str:
        done = subprocess.run([str(self.bin / program), *args], user=self.user, capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def start(self) -> HotStandby:
        """Starts the standby (it replays from the primary at once) and waits until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.data / "log"),
                  "-o", f'-h "" -k {self.socket} -p {self.PORT}', "start")
        return self

    def stop(self) -> None:
        """Stops the standby (a fast shutdown); `start` starts it again where it left off."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop")

    def url(self, primary_url: str) -> str:
        """The standby's URL of the database `primary_url` names."""
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(primary_url)["dbname"]
        return f"postgresql://postgres:@/{name}?host={self.socket}&port={self.PORT}"

    def sql(self, statement: str):
        """Runs one statement on the standby; returns its first row."""
        import psycopg

        with psycopg.connect(self.url("dbname=postgres"), autocommit=True) as conn:
            return conn.execute(statement).fetchone()

    def remove(self) -> None:
        """Stops the standby if it runs and deletes its files."""
        if (self.data / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
