"""A pydantic model for the typed-arguments tests (pydantic is a test extra)."""

from __future__ import annotations

from decimal import Decimal

import pydantic


class Invoice(pydantic.BaseModel):
    number: str
    amount: Decimal
    paid: bool = False
