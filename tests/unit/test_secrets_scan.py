"""`server.core.secrets_scan` at the intake gate: credentials refused naming the kind (never the value),
look-alikes stored.

The fake credentials are assembled at run time so that no scanner mistakes
this file for a leak; each has the real shape (prefix, alphabet, length).
"""

from __future__ import annotations

import base64
import json
import uuid

import grpc
import pytest

from mnemosync.v1 import memory_pb2 as pb

from helpers import fake_vector, update_op


def _chars(n: int, alphabet: str = "aB3dE5gH7jK9mN1pQ2sT4vW6yZ8") -> str:
    return (alphabet * (n // len(alphabet) + 1))[:n]


def _jwt() -> str:
    def part(doc: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': '1234567890', 'name': 'Ana'})}.{_chars(43)}"


SECRETS = [
    ("an AWS access key id", "deploy user key: " + "AKIA" + "IOSFODNN7" + "Q2XJ4MP"),
    ("an AWS secret access key", "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYz1Q2w3E4r5"),
    ("a private key", "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEpAIBAAKCAQEA" + _chars(40) + "\n-----END"),
    ("a private key", "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"),
    ("a GitHub token", "token ghp" + "_" + _chars(36)),
    ("a GitHub token", "github" + "_pat_" + _chars(22) + "_" + _chars(59)),
    ("a GitLab token", "glpat" + "-" + _chars(20)),
    ("a Slack token", "bot token xoxb" + "-123456789012-1234567890123-" + _chars(24)),
    ("a Slack webhook URL", "alerts go to https://hooks.slack.com/services/" + "T0AB12CD3/B0XY98ZW7/" + _chars(24)),
    ("an OpenAI API key", "OPENAI key sk" + "-proj-" + _chars(48)),
    ("an OpenAI API key", "sk" + "-" + _chars(48)),
    ("an Anthropic API key", "sk" + "-ant-api03-" + _chars(90)),
    ("a Stripe secret key", "stripe: sk" + "_live_" + _chars(24)),
    ("a Stripe secret key", "rk" + "_test_" + _chars(24)),
    ("a Google API key", "maps key AIza" + "Sy" + _chars(33)),
    ("a Hugging Face token", "hf" + "_" + _chars(34)),
    ("an npm token", "npm" + "_" + _chars(36)),
    ("a SendGrid API key", "SG" + "." + _chars(22) + "." + _chars(43)),
    ("a JSON Web Token", "session cookie: " + _jwt()),
    ("a password in a URL", "DATABASE_URL=postgres://app:" + "S3cr3t-Pa55" + "@db.internal:5432/app"),
    ("a password in a URL", "clone https://deploy:" + "gh0st-writer" + "@git.example.com/repo.git"),
    ("a bearer token", "curl -H 'Authorization: Bearer " + _chars(40) + "'"),
    ("a hard-coded password or secret", "the admin password=" + "hunter2!x"),
    ("a hard-coded password or secret", "DB_PASSWORD: '" + "Tr0ub4dor&3" + "'"),
    ("a hard-coded password or secret", 'client_secret = "' + _chars(32) + '"'),
    ("a hard-coded password or secret", "api_key: " + _chars(32)),
]


LOOK_ALIKES = [
    "AWS access key ids start with AKIA; never paste one here",
    "Rotate the keys stored under aws_secret_access_key in the vault every 90 days",
    "The BEGIN PUBLIC KEY block in certs/ca.pem is safe to share",
    "GitHub personal access tokens start with ghp_ and expire after 90 days",
    "We use sk-learn compatible estimators; task-1234 tracks the migration",
    "Stripe publishable keys look like pk_live_ and are public",
    "JWTs start with eyJ because that is base64 for a JSON object",
    "DATABASE_URL=postgres://app@db.internal:5432/app (password comes from PGPASSWORD)",
    "DATABASE_URL=postgres://app:${DB_PASSWORD}@db.internal:5432/app",
    "Use https://user:<password>@host when the proxy needs basic auth",
    "Health check: http://localhost:8080/health and git@github.com:org/repo.git",
    "Set password=${DB_PASSWORD} in the env file, never the value",
    "api_key = os.environ['OPENAI_API_KEY']",
    "The password reset flow sends an email; password: required, at least 12 characters",
    "Bearer tokens are checked by the gateway before the request reaches the service",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed the sha256 mismatch",
    "The request id is 8d2f5c1e-0000-4000-8000-000000000001",
    "secret_santa = a tradition; the secret: do not tell",
]


@pytest.mark.parametrize("kind,text", SECRETS, ids=[f"{i}-{k}" for i, (k, _) in enumerate(SECRETS)])
def test_content_with_a_credential_is_refused_naming_the_kind_and_never_echoing_it(agents, kind, text):
    a = agents("agent-a")
    with pytest.raises(grpc.RpcError) as err:
        a.add(f"Notes for the deploy. {text} (do not lose)")
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"content contains what looks like {kind}" in details and "intake-no-secrets" in details
    secretish = max(text.replace("'", " ").replace('"', " ").split(), key=len)
    assert secretish[-12:] not in details
    assert a.sync(0) == []


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_text_that_only_looks_like_a_credential_is_stored(agents, text):
    a = agents("agent-a")
    result = a.add(text)
    assert a.get(result.memory_id).content == text


def test_credentials_are_refused_in_every_text_field(agents):
    a = agents("agent-a")
    token = "ghp" + "_" + _chars(36)
    memory_id = a.add("Deploy notes").memory_id
    quote = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
        scope="user", content="Pin versions", embedding=fake_vector("Pin versions"), trust="principle",
        quote=f"use {token}"))
    forget = pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=1,
                          forget=pb.ForgetOp(reason=f"replaced by {token}"))
    for operation, field in ((update_op(memory_id, 1, f"Deploy with {token}"), "content"),
                             (quote, "quote"), (forget, "reason"),
                             (update_op(memory_id, 1, tags=[token], replace_tags=True), "tags")):
        with pytest.raises(grpc.RpcError) as err:
            a.append(operation)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"{field} contains what looks like a GitHub token" in err.value.details()
        assert token not in err.value.details()
