"""The topic API: a client's named lists of its recipients, which broadcasts go to."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import selectors, services
from ...errors import NotFound
from ...models import Topic
from ...services.fanout.topics import MAX_SUBSCRIBE, MAX_USER_ID_LENGTH
from ..schema import api_operation, request_example
from ..serializers import RefusesUnknownFields, StrictCharField
from ..views import USER_ID, _client, _path_user_id, _require_object

TOPIC_KEY = OpenApiParameter(
    "key",
    str,
    OpenApiParameter.PATH,
    pattern=r"^[-a-zA-Z0-9_]{1,100}$",
    description="A slug, e.g. product-news.",
    examples=[OpenApiExample("product-news", value="product-news")],
)
NO_TOPIC = "This client has no topic with this key."
BAD_KEY = "The key is not 1 to 100 letters, digits, '-' or '_'; `field` is key."


class TopicSerializer(RefusesUnknownFields, serializers.ModelSerializer):  # type: ignore[type-arg]
    name = StrictCharField(max_length=255, required=False, allow_blank=True, default="", help_text="For people.")
    subscriber_count = serializers.IntegerField(read_only=True, help_text="Recipients subscribed now.")

    class Meta:
        model = Topic
        fields = ["key", "name", "subscriber_count", "created_at", "updated_at"]
        read_only_fields = ["key", "created_at", "updated_at"]


class SubscribeSerializer(RefusesUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    user_ids = serializers.ListField(
        child=StrictCharField(max_length=MAX_USER_ID_LENGTH),
        min_length=1,
        max_length=MAX_SUBSCRIBE,
        help_text=f"1 to {MAX_SUBSCRIBE} user ids of stored recipients (PUT /recipients/{{user_id}}); one already "
        "subscribed stays so. An unknown one refuses the call: 400 listing them all in details.unknown_user_ids.",
    )


class SubscribedSerializer(serializers.Serializer):  # type: ignore[type-arg]
    added = serializers.IntegerField(help_text="New subscriptions (the others were there already).")
    subscriber_count = serializers.IntegerField()


def _topic(request: Request, key: str) -> Topic:
    topic = selectors.topic_get(client=_client(request), key=services.topic_key_check(key))
    if topic is None:
        raise NotFound(f"no topic {key!r}")
    return topic


class TopicView(APIView):
    @api_operation(
        "topics_retrieve",
        {200: TopicSerializer, 400: BAD_KEY, 404: NO_TOPIC},
        parameters=[TOPIC_KEY],
        summary="Get a topic",
        description="The topic with this key and how many recipients are subscribed to it now.",
    )
    def get(self, request: Request, key: str) -> Response:
        return Response(TopicSerializer(_topic(request, key)).data)

    @api_operation(
        "topics_upsert",
        {
            200: OpenApiResponse(TopicSerializer, description="Renamed."),
            201: OpenApiResponse(TopicSerializer, description="Created."),
            400: "The key or the name is invalid; `field` names it.",
        },
        request=TopicSerializer,
        parameters=[TOPIC_KEY],
        summary="Create or rename a topic",
        description="Creates the topic with this key (201), or renames it (200); its subscribers stay.",
        examples=[request_example("Product news", {"name": "Product news"})],
    )
    def put(self, request: Request, key: str) -> Response:
        serializer = TopicSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        _, created = services.topic_upsert(client=_client(request), key=key, name=serializer.validated_data["name"])
        topic = _topic(request, key)  # read again with its subscriber_count
        return Response(TopicSerializer(topic).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class TopicSubscribersView(APIView):
    @api_operation(
        "topics_subscribe",
        {
            200: SubscribedSerializer,
            400: f"The key is not a slug, user_ids is not a list of 1 to {MAX_SUBSCRIBE} user ids, some name no stored recipient "
            "(details.unknown_user_ids lists them; nobody was subscribed), or the topic would have more subscribers than "
            "the client may have on one (code limit_exceeded, limit TOPIC_SUBSCRIBERS_MAX, value its limit; nobody was "
            "subscribed).",
            404: NO_TOPIC,
        },
        request=SubscribeSerializer,
        parameters=[TOPIC_KEY],
        summary="Subscribe recipients to a topic",
        description="Subscribes stored recipients (PUT /recipients/{user_id}) by user_id, all or none: an unknown "
        "user_id, or more subscribers than the client may have on one topic (TOPIC_SUBSCRIBERS_MAX), subscribes "
        "nobody. One already subscribed stays so.",
        examples=[
            request_example(
                "Two recipients", {"user_ids": ["user-42", "user-43"]}, "Once both are stored (PUT /recipients/{user_id})."
            )
        ],
    )
    def post(self, request: Request, key: str) -> Response:
        serializer = SubscribeSerializer(data=_require_object(request.data))
        serializer.is_valid(raise_exception=True)
        result = services.topic_subscribe(client=_client(request), key=key, user_ids=serializer.validated_data["user_ids"])
        return Response({"added": result.added, "subscriber_count": result.subscriber_count})


class TopicSubscriberView(APIView):
    @api_operation(
        "topics_unsubscribe",
        {204: None, 400: "The key is not a slug, or the user_id is over 255 characters or holds NUL.", 404: NO_TOPIC},
        parameters=[TOPIC_KEY, USER_ID],
        summary="Unsubscribe a recipient from a topic",
        description="Takes the recipient off the topic; later broadcasts to it skip them. Idempotent.",
    )
    def delete(self, request: Request, key: str, user_id: str) -> Response:
        services.topic_unsubscribe(client=_client(request), key=key, user_id=_path_user_id(user_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
