"""`server.ca`: the revocation list the server reads."""

from __future__ import annotations

import shutil

import pytest

from server.app import run_server

from helpers import tls_remote, tls_settings


def test_a_revocation_list_not_signed_by_the_ca_stops_every_call(tmp_path, pki, tls_dir, foreign):
    with run_server(tls_settings(tmp_path, tls_dir)) as server:
        alice = tls_remote(server.address, pki / "agents/alice")
        try:
            shutil.copy(foreign / "crl.pem", tls_dir / "crl.pem")
            with pytest.raises(Exception, match="revocation list .* cannot be used"):
                alice.stats()
        finally:
            alice.close()
