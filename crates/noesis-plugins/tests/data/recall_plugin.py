#!/usr/bin/env python3
"""The recall plugin as a program speaking noesis's plugin protocol (JSON
lines over stdio). Used by the contract tests; also a template for writing a
plugin in Python. Misbehaviour on demand: the first argument is one of
normal, crash, hang, garbage, wrong-id, refuse, crash-in-store, deaf (answers
hello, then stops reading its input)."""
import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "normal"


def transform_input(raw, context):
    query = raw.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("`query` must be a non-empty string")
    files = raw.get("files") or []
    current = context["current_frame"]["frame_id"]
    visible = [f["frame_id"] for f in context["frames"]
               if f["frame_id"] != current and f["status"] != "invalidated"]
    suspended = context["suspended_frames"]
    text = "question: %s\n" % query
    if suspended:
        text += "set aside earlier (can resume):\n" + "".join("  %s\n" % s for s in suspended)
    return {"text": text, "files": files,
            "input": {"query": query, "visible_frames": visible, "files": files,
                      "suspended": [{"frame_id": s} for s in suspended]}}


def parse_output(raw, frame):
    if isinstance(raw, str):
        return {"conclusion": raw, "confidence": 0.5, "data": {"answer": raw}}
    if "answer" not in raw:
        raise ValueError("the reply has no `answer`")
    cites = [c for c in raw.get("cites", []) if c != frame["frame_id"]]
    return {"conclusion": raw["answer"], "confidence": raw.get("confidence", 0.5),
            "data": raw, "also": {"frames": cites}}


def main():
    for line in sys.stdin:
        req = json.loads(line)
        rid, method, params = req["id"], req["method"], req.get("params", {})
        if method == "hello":
            reply = {"id": rid, "result": {"protocol": 1, "name": "recall.py"}}
            if MODE == "deaf":
                sys.stdout.write(json.dumps(reply) + "\n")
                sys.stdout.flush()
                import time
                time.sleep(3600)
        elif MODE == "crash" and method == "transform_input":
            sys.stderr.write("recall.py: something broke\n")
            sys.stderr.flush()
            sys.exit(3)
        elif MODE == "hang" and method == "transform_input":
            import time
            time.sleep(3600)
        elif MODE == "garbage" and method == "parse_output":
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
            continue
        elif MODE == "wrong-id" and method == "transform_input":
            reply = {"id": rid + 7, "result": {"text": "x"}}
        elif MODE == "crash-in-store" and method == "store":
            sys.exit(4)
        else:
            try:
                if method == "transform_input":
                    result = transform_input(params["raw"], params["context"])
                elif method == "parse_output":
                    if MODE == "refuse":
                        raise ValueError("I refuse")
                    result = parse_output(params["raw"], params["frame"])
                elif method == "store":
                    result = {}
                else:
                    raise ValueError("unknown method " + method)
                reply = {"id": rid, "result": result}
            except Exception as e:  # the plugin's own refusal
                reply = {"id": rid, "error": {"message": str(e)}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
