"""``pii``: typed placeholders for personal data and secrets, with a policy per kind of
text (``stage``); what each type looks like (``patterns``), the card networks' issuer
table (``cards``) and the context that tells a number or address from code and math
(``context``)."""

from stages.pii.stage import Pii

__all__ = ["Pii"]
