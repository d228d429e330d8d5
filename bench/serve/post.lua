-- post.lua — wrk's request for bench/serve/run.py: POST of the body in
-- the environment variable BODY (JSON) to the URL's path.
wrk.method = "POST"
wrk.body = os.getenv("BODY")
wrk.headers["Content-Type"] = "application/json"
