"""The API of fan-out: topics and their subscribers, broadcasts to them. Thin views over
services/fanout/, built on the API's shared pieces (``api/schema.py``, ``api/serializers.py``,
``api/views.py``'s helpers)."""
