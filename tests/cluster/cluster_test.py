#!/usr/bin/env python3
"""Multi-node tests against real sshd servers on loopback or in network
namespaces: the table of cases and the runner.

Each case starts its own sshd processes (one per simulated node, on
127.0.0.2, 127.0.0.3, ... with a free port each), with an ed25519 host key
per server, a user key and a private known_hosts generated for the test,
compiles a small workflow with sflowc, and runs the real executable with
--nodes.  After every case no worker process may be left.  The netns_*
cases put each node's sshd in a network namespace of its own behind a veth
pair (NetnsCluster), so that a network cut is a link set down; they need
root and a working `ip netns add`, and skip (77) saying why otherwise.

    cluster_test.py --sflowc PATH CASE     run one case (exit 77: skipped)
    cluster_test.py --list                 the case names

The harness (Cluster, NetnsCluster, checks) is harness.py; the cases are
cases_start.py (start-up, SSH, node loss, host checks), cases_tasks.py
(task calls), cases_objects.py (the object store, whole programs),
cases_actors.py (traces, actors, groups, training) and cases_env.py
(worker environment, network namespaces, campaigns).

Needs /usr/sbin/sshd and ssh-keygen (openssh-server, installed by
scripts/install-deps.sh).  As root, sshd runs with privilege separation in
/run/sshd, which is created when missing; as another user sshd can only log
in that same user, which is all the tests need.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
from harness import *  # noqa: E402,F401,F403
from cases_start import *  # noqa: E402,F401,F403
from cases_tasks import *  # noqa: E402,F401,F403
from cases_objects import *  # noqa: E402,F401,F403
from cases_actors import *  # noqa: E402,F401,F403
from cases_env import *  # noqa: E402,F401,F403
from cases_proxy import *  # noqa: E402,F401,F403


CASES = {
    "cpu_feature_missing": (2, case_cpu_feature_missing),
    "worker_libraries": (2, case_worker_libraries),
    "host_glibc_and_arch": (2, case_host_glibc_and_arch,
                            lambda sflowc, n: Cluster(sflowc, n, sshd_extra={
                                i: f"SetEnv PATH={FAKE_BIN}-{i}:/usr/bin:/bin\n"
                                for i in range(2)})),
    "deploy_2": (2, case_deploy_2),
    "deploy_4": (4, case_deploy_4),
    "cache_damaged": (2, case_cache_damaged),
    "worker_killed_at_start": (3, case_worker_killed_at_start),
    "worker_stopped_at_start": (3, case_worker_stopped_at_start),
    "worker_slow_at_start": (3, case_worker_slow_at_start),
    "changed_host_key": (2, case_changed_host_key),
    "unknown_host_key": (2, case_unknown_host_key),
    "known_hosts_rules": (2, case_known_hosts_rules),
    "unreachable_host": (1, case_unreachable_host),
    "bad_user_key": (1, case_bad_user_key),
    "wrong_secret": (2, case_wrong_secret),
    "control_plane_preauth": (2, case_control_plane_preauth),
    "allreduce_3": (3, case_allreduce_3),
    "allreduce_4": (4, case_allreduce_4),
    "worker_sigkill": (3, case_worker_sigkill),
    "worker_sigstop": (3, case_worker_sigstop),
    "head_sigkill": (3, case_head_sigkill),
    "agent_and_default_keys": (2, case_agent_and_default_keys),
    "bad_hostfile": (1, case_bad_hostfile),
    "ssh_config_alias": (2, case_ssh_config_alias,
                         lambda sflowc, n: Cluster(sflowc, n, port=free_port("127.0.0.2"))),
    "proxy_jump": (3, case_proxy_jump, make_bastion_cluster),
    "proxy_command": (3, case_proxy_command, make_bastion_cluster),
    "proxy_unreachable": (3, case_proxy_unreachable, make_bastion_cluster),
    "ssh_config_identities_only": (1, case_ssh_config_identities_only,
                                   lambda sflowc, n: Cluster(sflowc, n,
                                                             port=free_port("127.0.0.2"))),
    "colon_slots_schedule": (1, case_colon_slots_schedule,
                             lambda sflowc, n: Cluster(sflowc, n, port=free_port("127.0.0.2"))),
    "tasks_sum_3": (2, case_tasks_sum_3),
    "tasks_grown_arrays": (2, case_tasks_grown_arrays),
    "tasks_gpus": (2, case_tasks_gpus),
    "tasks_gpus_node_lost": (2, case_tasks_gpus_node_lost),
    "tasks_print": (2, case_tasks_print),
    "tasks_print_resume": (2, case_tasks_print_resume),
    "tasks_worker_killed": (3, case_tasks_worker_killed),
    "tasks_retry_attempt": (2, case_tasks_retry_attempt),
    "tasks_objects": (2, case_tasks_objects),
    "tasks_object_owner_killed": (2, case_tasks_object_owner_killed),
    "tasks_object_moves": (2, case_tasks_object_moves),
    "tasks_object_dropped": (2, case_tasks_object_dropped),
    "tasks_object_input_lost": (2, case_tasks_object_input_lost),
    "tasks_object_wrong_secret": (2, case_tasks_object_wrong_secret),
    "tasks_pipeline_example": (2, case_tasks_pipeline_example),
    "tasks_future_arg_failed": (2, case_tasks_future_arg_failed),
    "tasks_object_mixed": (3, case_tasks_object_mixed),
    "actors_remote": (2, case_actors_remote),
    "maps_fn_values_nodes": (2, case_maps_fn_values_nodes),
    "tensors_nodes": (2, case_tensors_nodes),
    "rl_runners_nodes": (3, case_rl_runners_nodes),
    "trace_nodes": (2, case_trace_nodes),
    "rand_nodes": (2, case_rand_nodes),
    "tune_nodes": (2, case_tune_nodes),
    "actors_gpus": (2, case_actors_gpus),
    "actors_gpus_group": (2, case_actors_gpus_group),
    "actors_print_resume": (2, case_actors_print_resume),
    "tasks_future_tree": (2, case_tasks_future_tree),
    "tasks_relative_paths": (2, case_tasks_relative_paths),
    "actor_worker_killed": (3, case_actor_worker_killed),
    "actor_restarts_exhausted": (2, case_actor_restarts_exhausted),
    "group_allreduce_nodes": (3, case_group_allreduce_nodes),
    "nn_allreduce_nodes": (3, case_nn_allreduce_nodes),
    "shard_nodes": (3, case_shard_nodes),
    "ring_listener_preauth": (2, case_ring_listener_preauth),
    "group_worker_killed": (4, case_group_worker_killed),
    "group_resume": (3, case_group_resume),
    "group_resume_slow_disk": (3, case_group_resume_slow_disk),
    "finetune_nodes": (2, case_finetune_nodes),
    "lm_finetune_nodes": (2, case_lm_finetune_nodes),
    "train_worker_killed": (3, case_train_worker_killed),
    "finetune_worker_killed": (3, case_finetune_worker_killed),
    "campaign_nodes_resume": (2, case_campaign_nodes_resume),
    "head_sigterm_resume": (2, case_head_sigterm_resume),
    "worker_env": (2, case_worker_env,
                   lambda sflowc, n: Cluster(sflowc, n,
                                             sshd_extra={0: "SetEnv CUDA_VISIBLE_DEVICES=1\n"})),
    "netns_tasks": (3, case_netns_tasks, NetnsCluster),
    "netns_link_down": (3, case_netns_link_down, NetnsCluster),
    "netns_head_unreachable_at_start": (2, case_netns_head_unreachable_at_start, NetnsCluster),
    "netns_head_silent_at_start": (2, case_netns_head_silent_at_start, NetnsCluster),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    # SIGTERM unwinds like ^C, so the cluster's finally (namespaces, veths,
    # sshd) still runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.list:
        print("\n".join(CASES))
        return 0
    if a.case not in CASES:
        print(f"unknown case {a.case}", file=sys.stderr)
        return 2
    if not os.path.exists(SSHD) or not shutil.which("ssh-keygen"):
        print("SKIP: needs openssh-server (/usr/sbin/sshd) and ssh-keygen "
              "(scripts/install-deps.sh installs them)")
        return SKIP
    n, fn, *make = CASES[a.case]
    c = None
    try:
        c = (make[0] if make else Cluster)(a.sflowc, n)
        fn(c)
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP
    except Fail as e:
        print(f"FAIL {a.case}: {e}", file=sys.stderr)
        return 1
    finally:
        if c:
            c.close()
    print(f"ok {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
