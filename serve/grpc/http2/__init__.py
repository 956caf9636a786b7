"""gRPC over HTTP/2 on an asyncio.Protocol: the serving path that measured ~3-4x grpc.aio here.

grpcio's server spends most of a call in its own Python layer (poller, completion queue,
callbacks); this package frames gRPC itself (RFC 9113 frames, HPACK through the `hpack`
package, gRPC's length-prefixed messages) and hands each call's message bytes to a router.
It knows gRPC's wire format but not Triton's service: `serve.grpc` supplies the methods.
"""
