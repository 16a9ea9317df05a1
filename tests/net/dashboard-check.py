#!/usr/bin/env python3
"""Check the Grafana dashboard against a live pboxd and Prometheus.

  dashboard-check.py DASHBOARD.json METRICS.txt PROMETHEUS_URL

Every panel query must evaluate on the Prometheus server (status success,
Grafana's variables replaced: $__rate_interval by 5s, $instance by .*), and
every pbox_* metric it names must be in pboxd's /metrics exposition.
Prints each problem; exits 1 if there is any.
"""
import json
import re
import sys
import urllib.parse
import urllib.request


def main():
    dash = json.load(open(sys.argv[1]))
    served = set()
    for line in open(sys.argv[2]):
        if line.startswith("# TYPE "):
            served.add(line.split()[2])
    url = sys.argv[3].rstrip("/") + "/api/v1/query"
    bad = 0
    n = 0
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"]
            n += 1
            for name in set(re.findall(r"\bpbox_[a-z0-9_]+", expr)):
                if name not in served:
                    print(f"panel '{panel['title']}': {name} is not in /metrics")
                    bad = 1
            q = expr.replace("$__rate_interval", "5s").replace("$instance", ".*")
            body = urllib.parse.urlencode({"query": q}).encode()
            try:
                with urllib.request.urlopen(url, body, timeout=5) as r:
                    status = json.load(r).get("status")
            except Exception as e:  # HTTP 400 on a syntax error
                status = f"error ({e})"
            if status != "success":
                print(f"panel '{panel['title']}': {expr!r}: {status}")
                bad = 1
    print(f"        {n} queries in {len(dash['panels'])} panels")
    return bad


if __name__ == "__main__":
    sys.exit(main())
