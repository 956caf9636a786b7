"""The native HTTP/1.1 front end: asyncio.Protocol on httptools (the default)."""
