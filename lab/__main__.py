"""python -m lab {up,down,status,image-variant,image-restore,info}"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .errors import LabError


def _print_status(rep: dict) -> None:
    for n in rep["nodes"]:
        addrs = ", ".join(
            f"{k}={'/'.join(v)}" for k, v in sorted(n["addresses"].items()) if k != "lo"
        )
        print(
            f"{n['name']:<12} netns={n['netns']}{'' if n['netns_present'] else '(missing)'} "
            f"{addrs or '-'}"
        )
        print(
            f"{'':<12} sshd={'up' if n['sshd_alive'] else 'DOWN'} "
            f"dockerd={'up ' + (n['dockerd_version'] or '?') if n['dockerd_alive'] else 'DOWN'} "
            f"image={(n['image_id'] or 'MISSING')[:19]} {'ok' if n['ok'] else 'NOT OK'}"
        )
    if not rep["nodes"]:
        print("lab is down (run `python -m lab up`)")
    print(
        f"forwarding={'ok' if rep['forwarding_ok'] else 'MISSING'} "
        f"isolated_workers={rep['isolated_workers']} variant_node={rep['variant_node']} "
        f"=> {'OK' if rep['ok'] else 'NOT OK'}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab", description="N emulated DGX Sparks on this machine"
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="bring the lab up (idempotent)")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument(
        "--isolated-workers",
        action="store_true",
        help="workers get no management interface (reach them through the head)",
    )
    up.add_argument(
        "--variant-node",
        type=int,
        default=None,
        help="give this worker a different image ID under the same tag",
    )
    up.add_argument(
        "--engine",
        choices=("emulated", "real"),
        default="emulated",
        help="real: the nodes also run real vLLM (CPU build) and Ray (configs/lab-real*.yaml)",
    )
    up.add_argument("--json", action="store_true", help="print the LabInfo as JSON")
    down = sub.add_parser("down", help="remove everything the lab made")
    down.add_argument(
        "--purge", action="store_true", help="also the data-roots, keys and the base image cache"
    )
    st = sub.add_parser("status", help="per-node health; exit 0 if all good")
    st.add_argument("--json", action="store_true")
    sub.add_parser("info", help="print the LabInfo as JSON")
    sub.add_parser(
        "prepare-real",
        help="build (or check) the real engine's cached venv and model "
        "without bringing the lab up: minutes the first time, then instant",
    )
    var = sub.add_parser(
        "image-variant", help="give a node a different image ID under the same tag"
    )
    var.add_argument("--node", type=int, required=True)
    sub.add_parser("image-restore", help="put the original image back on every node")
    args = ap.parse_args(argv)

    from . import api

    t0 = time.monotonic()
    try:
        if args.cmd == "up":
            info = api.lab_up(args.nodes, args.isolated_workers, args.variant_node, args.engine)
            if args.json:
                print(json.dumps(info.to_dict(), indent=2))
            else:
                for n in info.nodes:
                    print(
                        f"{n.name}: ssh root@{n.ssh_host} (fabric {n.fabric_ip}) docker {n.docker_host}"
                    )
                print(
                    f"key {info.key_path}, known_hosts {info.known_hosts_path}, image {info.image_tag} "
                    f"{(info.image_id or '')[:19]}; up in {time.monotonic() - t0:.1f}s"
                )
                if info.real_image_tag:
                    print(
                        f"real engine: image {info.real_image_tag}, venv {info.real_venv}, "
                        f"model {info.real_model} (one core per node)"
                    )
        elif args.cmd == "down":
            api.lab_down(purge=args.purge)
            print(f"lab down{' (purged)' if args.purge else ''} in {time.monotonic() - t0:.1f}s")
        elif args.cmd == "status":
            rep = api.status()
            print(json.dumps(rep, indent=2)) if args.json else _print_status(rep)
            return 0 if rep["ok"] else 1
        elif args.cmd == "prepare-real":
            from . import real_engine

            venv, model = real_engine.ensure()
            print(f"real engine ready: venv {venv}, model {model} in {time.monotonic() - t0:.1f}s")
        elif args.cmd == "info":
            print(json.dumps(api.lab_info().to_dict(), indent=2))
        elif args.cmd == "image-variant":
            print(api.set_image_variant(args.node))
        elif args.cmd == "image-restore":
            api.restore_image()
            print("image restored")
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
