"""Clients of a KServe v2 server: HTTP control calls and the infer connection."""
