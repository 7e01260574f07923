"""Model providers: one interface, one module per wire protocol (and the scripted ``faux``)."""
