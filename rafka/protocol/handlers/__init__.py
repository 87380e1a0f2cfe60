"""One module per Kafka API. A handler decodes nothing and encodes nothing (dispatch
does), touches no log or group (core decides, through what the actor passes in):
it maps a kio request body and a RequestContext to a kio response body."""
