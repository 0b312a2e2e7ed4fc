"""Benchmark (issue 22): the same broker's throughput over PLAINTEXT, SSL and SASL_SSL.

One `tidelog serve` child with three listeners (one per security protocol, same data
directory, same process), certificates from a throwaway trustme CA, a SCRAM-SHA-512
user. From this process, with 100-byte values in pre-encoded batches of 1,000:

- produce: `Client.produce` (acks 1) of the same batch bytes, back to back, into a
  fresh topic per run;
- fetch: `Client.fetch` of that topic from offset 0 to its end (1 MiB per fetch).

Rounds interleave the protocols (plaintext, SSL, SASL_SSL, then again) so the machine's
drift hits all three alike; the results are per-protocol medians, every run is in the
JSON. Connection setup (handshake, SCRAM) is outside the timed part; it is measured
on its own as connections per second.

    .venv/bin/python -m bench.tls_bench [--records N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trustme

from broker.security.credentials import CredentialStore
from protocol.batch import encode_batch
from protocol.sasl.scram import ITERATIONS_MIN
from tidelog.client import Client
from tidelog.security import Security

ROOT = Path(__file__).resolve().parent.parent
VALUE_BYTES = 100
BATCH_RECORDS = 1000
FETCH_BYTES = 1024 * 1024
START_TIMEOUT_S = 60.0
PASSWORD = "bench-only"
CONNECTS = 50


def _start(data_dir: Path, pki: Path) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    sets = [
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        f"ssl.certfile={pki / 'server.pem'}",
        f"ssl.keyfile={pki / 'server.key'}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
    ]
    cmd = [sys.executable, "-m", "broker", "serve", "--data-dir", str(data_dir)]
    cmd += ["--metrics-listen", "127.0.0.1:0", "--log-format", "json"]
    for item in sets:
        cmd += ["--set", item]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    for raw in proc.stdout:
        if b'"broker_ready"' in raw:
            listeners = json.loads(raw)["listeners"]
            ports = {s.split("://")[0]: int(s.rsplit(":", 1)[1]) for s in listeners}
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, ports
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("broker did not start")


def _securities(pki: Path) -> dict[str, Security]:
    ca = str(pki / "ca.pem")
    return {
        "PLAINTEXT": Security(),
        "SSL": Security("SSL", ssl_cafile=ca),
        "SASL_SSL": Security(
            "SASL_SSL",
            ssl_cafile=ca,
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="bench",
            sasl_plain_password=PASSWORD,
        ),
    }


def _run(address: str, security: Security, topic: str, batches: int) -> dict[str, float]:
    batch = encode_batch([(None, b"x" * VALUE_BYTES, (), 1_700_000_000_000)] * BATCH_RECORDS)
    records = batches * BATCH_RECORDS
    with Client(address, security=security) as client:
        client.create_topic(topic)
        started = time.perf_counter()
        for _ in range(batches):
            client.produce(topic, 0, batch, acks=1)
        produce_s = time.perf_counter() - started
        offset, started = 0, time.perf_counter()
        while offset < records:
            answer = client.request(
                "fetch",
                {
                    "max_wait_ms": 0,
                    "min_bytes": 1,
                    "max_bytes": FETCH_BYTES,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {"partition": 0, "offset": offset, "max_bytes": FETCH_BYTES}
                            ],
                        }
                    ],
                },
            )
            got = len(answer["topics"][0]["partitions"][0]["records"])
            assert got > 0, "fetch returned nothing before the end"
            offset += got // len(batch) * BATCH_RECORDS  # whole, equal batches
        fetch_s = time.perf_counter() - started
        client.delete_topic(topic)
    started = time.perf_counter()
    for _ in range(CONNECTS):
        with Client(address, security=security) as client:
            client.connect()
    connect_s = time.perf_counter() - started
    return {
        "produce_records_per_s": records / produce_s,
        "fetch_records_per_s": records / fetch_s,
        "connects_per_s": CONNECTS / connect_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000, help="records per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tidelog-tls-bench-") as tmp:
        root = Path(tmp)
        pki = root / "pki"
        pki.mkdir()
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1")
        ca.cert_pem.write_to_path(str(pki / "ca.pem"))
        leaf.private_key_pem.write_to_path(str(pki / "server.key"))
        for blob in leaf.cert_chain_pems:
            blob.write_to_path(str(pki / "server.pem"), append=True)
        CredentialStore(root / "data").set_user("bench", PASSWORD, iterations=ITERATIONS_MIN)
        proc, ports = _start(root / "data", pki)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in ports}
        try:
            securities = _securities(pki)
            for round_no in range(args.rounds + 1):  # round 0 warms up
                for name, port in ports.items():
                    result = _run(
                        f"127.0.0.1:{port}",
                        securities[name],
                        f"bench-{name.lower()}-{round_no}",
                        args.records // BATCH_RECORDS,
                    )
                    print(f"round {round_no} {name}: {result}", file=sys.stderr, flush=True)
                    if round_no:
                        runs[name].append(result)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    medians: dict[str, Any] = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    print(json.dumps({"records": args.records, "medians": medians, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
