"""Authentication (SASL/PLAIN), client credentials and ACL authorization: the layer every server puts
in front of its handlers (layer.py) and what it uses."""
