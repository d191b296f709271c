"""Policy: what a notification may be and whether it may go. Its content (templates rendered
within their bounds and budget, in the render sandbox's limited processes; the unsubscribe link),
the recipient's preferences, the consent decided at accept, quiet hours, the client's suppression
list, caps per recipient, the client's own limits and the channel fallback route.

Rule: may import records/ only (and the layers below services: selectors, channels, models, conf);
it decides and writes nothing that delivery or intake own."""
