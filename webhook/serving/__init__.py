"""`gangkeeper serve`: an HTTP/1.1-over-TLS front end for the Flask admission app.

kube-apiserver calls webhooks over HTTP/1.1 with one connection per concurrent call (kubernetes#82090),
so the server must hold many mostly idle connections cheaply and never let one slow client hold a
worker. Each worker process runs one asyncio loop: connections cost a few kilobytes, every stage of a
request has a deadline, and the app runs on the loop (small reviews) or on one side thread (large ones).
"""
