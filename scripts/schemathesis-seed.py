"""Fixtures and configuration for scripts/schemathesis.sh.

Signs in the three callers the runs use (tokens go to files, never to the
output), creates a few real documents (orders with lines, an allocation, a
confirmed order with its invoice, a cancelled one, a partner with pending
deliveries), and writes a schemathesis.toml whose dictionaries feed their ids
into the generated requests part of the time. Without them nearly every
request would name a random UUID and stop at 404 or `validation_failed`;
with them the fuzzer also reaches version conflicts, allocations against
real stock, invalid states, credit checks and replays.

    python schemathesis-seed.py BASE_URL OUT_DIR
"""

import json
import sys
import time
import uuid

import requests

base, out = sys.argv[1], sys.argv[2]
PASSWORD = "holdfast-demo"


def login(email):
    r = requests.post(
        f"{base}/v1/sessions",
        json={"tenant": "acme", "email": email, "password": PASSWORD, "device_name": "schemathesis"},
        timeout=30,
    )
    r.raise_for_status()
    return r.json()["token"]


# Every sign-in before any run: the sign-in fuzzing trips this address's
# throttle (a documented 429), which would refuse sign-ins after it.
tokens = {
    "dana": login("dana@acme.test"),
    "ops": login("ops@acme.test"),
    # Revoked by the logout run; nothing else uses it.
    "doomed": login("dana@acme.test"),
}
for name, token in tokens.items():
    with open(f"{out}/{name}.token", "w") as f:
        f.write(token)


def call(method, path, token, body=None, key=True):
    headers = {"Authorization": f"Bearer {token}"}
    if key:
        headers["Idempotency-Key"] = str(uuid.uuid4())
    r = requests.request(method, f"{base}{path}", json=body, headers=headers, timeout=30)
    if r.status_code >= 300:
        raise SystemExit(f"seed: {method} {path} answered {r.status_code}: {r.text}")
    return r.json() if r.content else None


dana, ops = tokens["dana"], tokens["ops"]

# A partner first, so the orders below fan out into deliveries. Its URL is a
# public (TEST-NET) address: accepted without --relay-allow-private-targets,
# never answering, so its deliveries stay pending for requeue to find.
partner = call("POST", "/v1/admin/partners", ops,
               {"name": "schemathesis", "url": "https://192.0.2.10/holdfast", "event_types": ["order.*"]}, key=False)

customers = call("GET", "/v1/customers", dana, key=False)["customers"]
unlimited = next(c["id"] for c in customers if c["credit_limit"] is None)
skus = [s for s in call("GET", "/v1/skus?limit=60", dana, key=False)["skus"] if s["ats"] >= 20][:20]
if len(skus) < 4:
    raise SystemExit("seed: the demo fixture has too few SKUs with stock")

orders, lines, invoices = [], [], []
for n in range(4):
    order_id = str(uuid.uuid4())
    order = call("POST", "/v1/orders", dana, {"id": order_id, "customer_id": unlimited, "customer_po": f"ST-{n}"})
    for sku in skus[2 * n: 2 * n + 2]:
        line_id = str(uuid.uuid4())
        order = call("POST", f"/v1/orders/{order_id}/lines", dana,
                     {"id": line_id, "sku_id": sku["id"], "qty_ordered": 4, "base_version": order["version"]})
        lines.append(line_id)
    first = order["lines"][0]["id"]
    order = call("POST", f"/v1/orders/{order_id}/lines/{first}/allocate", dana, {"qty": 2})["order"]
    if n == 2:
        order = call("POST", f"/v1/orders/{order_id}/confirm", dana, {"base_version": order["version"]})
        invoices.append(order["invoice_id"])
    elif n == 3:
        call("POST", f"/v1/orders/{order_id}/cancel", dana, {"base_version": order["version"]})
    orders.append(order_id)

deliveries = []
for _ in range(50):
    deliveries = [d["id"] for d in call("GET", "/v1/admin/deliveries?state=pending", ops, key=False)["deliveries"]]
    if deliveries:
        break
    time.sleep(0.2)


def toml_values(values):
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


dictionaries = {
    "customers": [c["id"] for c in customers],
    "skus": [s["id"] for s in skus],
    "orders": orders,
    "lines": lines,
    "invoices": invoices,
    "partners": [partner["id"]],
    # Falls back to an id that names nothing when the relay has not fanned out yet.
    "deliveries": deliveries or [1],
    "versions": [1, 2, 3, 4, 5, 6, 7, 8],
    "quantities": [1, 2, 3, 4, 6, 25],
    "tenants": ["acme", "globex"],
    "providers": ["warehouse", "payments"],
    "emails": ["dana@acme.test", "priya@acme.test", "ops@acme.test", "gina@globex.test"],
    "event_types": ["order.*", "invoice.paid", "sku.ats_changed", "*"],
    "urls": ["https://192.0.2.10/holdfast", "https://198.51.100.7/hooks"],
}

body_bindings = {
    "customer_id": ("customers", 0.8),
    "set.customer_id": ("customers", 0.8),
    "sku_id": ("skus", 0.8),
    "base_version": ("versions", 0.7),
    "qty": ("quantities", 0.7),
    "qty_ordered": ("quantities", 0.7),
    "tenant": ("tenants", 0.7),
    "email": ("emails", 0.5),
    "provider": ("providers", 0.7),
    "url": ("urls", 0.7),
    "event_types[*]": ("event_types", 0.7),
}

path_bindings = {
    "^/v1/orders/": {"id": "orders", "line_id": "lines"},
    "^/v1/skus/": {"id": "skus"},
    "^/v1/invoices/": {"id": "invoices"},
    "^/v1/admin/partners/": {"id": "partners"},
    "^/v1/admin/deliveries/": {"id": "deliveries"},
    "^/v1/webhooks/": {"tenant": "tenants", "provider": "providers"},
}

toml = ["# Written by scripts/schemathesis-seed.py for one run.", ""]
for name, values in dictionaries.items():
    toml += [f"[dictionaries.{name}]", f"values = {toml_values(values)}", ""]
toml.append("[parameters]")
for field, (dictionary, p) in body_bindings.items():
    toml.append(f'"body.{field}" = {{ dictionary = "{dictionary}", probability = {p} }}')
toml.append("")
# Ids the fuzzer saw in earlier responses (orders it created) are reused too.
toml += ["[phases.fuzzing.extra-data-sources]", "responses = true", ""]
for regex, params in path_bindings.items():
    toml += ["[[operations]]", f'include-path-regex = "{regex}"', "[operations.parameters]"]
    toml += [f'"path.{name}" = {{ dictionary = "{d}", probability = 0.7 }}' for name, d in params.items()]
    toml.append("")

with open(f"{out}/schemathesis.toml", "w") as f:
    f.write("\n".join(toml))
print(f"seed: {len(orders)} orders, {len(lines)} lines, {len(invoices)} invoice, "
      f"1 partner, {len(deliveries)} pending deliveries")
