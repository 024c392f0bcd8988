"""Schemathesis hooks for make contract-fuzz.

A charge the generator makes up names an order the service does not know
(422 order-not-found), so on its own no charge would succeed and the
stateful phase would never follow a link from a created payment. run.sh
seeds orders FUZZ_ORDER_FIRST.. with one customer, amount and currency;
three schema-valid charges in four are pointed at the next of them, with
a fresh externalPaymentId, so it charges (201) and its links (read it back,
refund it, list its refunds) have a payment to act on. Every other one of
those that names no captureMethod authorizes ("manual"), so the links to a
capture and a void meet AUTHORIZED payments; a positive capture is put in
the seeded orders' currency and at most their amount, so that on an
authorization it captures (201) rather than always being capture-mismatch.
Only positive cases are touched: a negative case must stay invalid.
"""

import itertools
import os
from decimal import Decimal, InvalidOperation

import schemathesis
from schemathesis import GenerationMode

ORDER_FIRST = int(os.environ["FUZZ_ORDER_FIRST"])
ORDER_COUNT = int(os.environ["FUZZ_ORDER_COUNT"])
CUSTOMER = int(os.environ["FUZZ_CUSTOMER"])
AMOUNT = os.environ["FUZZ_AMOUNT"]
CURRENCY = os.environ["FUZZ_CURRENCY"]

_positive_charges = itertools.count()
_orders = itertools.count(ORDER_FIRST)


@schemathesis.hook
def map_case(context, case):
    if case.operation.method.upper() != "POST":
        return case
    if case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
        return case
    if case.operation.path == "/payments/{id}/captures":
        return _capture(case)
    if case.operation.path != "/payments":
        return case
    if not isinstance(case.body, dict) or next(_positive_charges) % 4 == 3:
        return case
    order = next(_orders)
    if order >= ORDER_FIRST + ORDER_COUNT:
        return case
    # The generated id comes first, so the sandbox's prefixes (decline_,
    # drop_, ...) still pick its behaviour; the order number makes it new.
    external = f"{case.body.get('externalPaymentId', '')[:100]}~{order}"
    case.body = {
        **case.body,
        "orderId": order,
        "customerId": CUSTOMER,
        "amount": AMOUNT,
        "currency": CURRENCY,
        "externalPaymentId": external,
    }
    if "captureMethod" not in case.body and order % 2 == 0:
        case.body["captureMethod"] = "manual"
    return case


def _capture(case):
    if not isinstance(case.body, dict):
        return case
    try:
        amount = Decimal(str(case.body.get("amount", "")))
    except InvalidOperation:
        return case
    case.body = {
        **case.body,
        "currency": CURRENCY,
        "amount": case.body["amount"] if amount <= Decimal(AMOUNT) else AMOUNT,
    }
    return case
