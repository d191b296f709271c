"""The API of consent: categories (opt-in or opt-out, critical, capped), a recipient's preferences,
the one-click unsubscribe link and page, the client's suppression list. Thin views over
services/policy/, built on the API's shared pieces."""
