"""policy/v1 PodDisruptionBudget and networking.k8s.io/v1 NetworkPolicy are served (stored
faithfully, like apps/v1: no controller evaluates them; the eviction API ignores budgets)."""

from __future__ import annotations

from api_support import api_error
from kubernetes_asyncio import client as k8s


async def test_pod_disruption_budget_is_served_with_a_status_subresource(
    api_client: k8s.ApiClient, ns: str
) -> None:
    policy = k8s.PolicyV1Api(api_client)
    body = {
        "metadata": {"name": "nats"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "nats"}}},
    }
    created = await policy.create_namespaced_pod_disruption_budget(ns, body)
    assert created.spec.max_unavailable == 1 and created.metadata.generation == 1
    await policy.patch_namespaced_pod_disruption_budget_status(
        "nats",
        ns,
        {
            "status": {
                "currentHealthy": 2,
                "desiredHealthy": 1,
                "disruptionsAllowed": 1,
                "expectedPods": 3,
            }
        },
    )
    listed = await policy.list_namespaced_pod_disruption_budget(ns)
    assert [p.status.disruptions_allowed for p in listed.items] == [1]


async def test_network_policy_is_served_and_decoded_into_its_go_type(
    api_client: k8s.ApiClient, ns: str
) -> None:
    networking = k8s.NetworkingV1Api(api_client)
    body = {
        "metadata": {"name": "routes"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "nats"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": 6222, "protocol": "TCP"}]}],
        },
    }
    created = await networking.create_namespaced_network_policy(ns, body)
    assert created.spec.ingress[0].ports[0].port == 6222
    body["metadata"]["name"] = "bad"
    body["spec"]["ingress"][0]["ports"][0]["port"] = True
    code, status = await api_error(networking.create_namespaced_network_policy(ns, body))
    assert code == 400 and "cannot be handled as a NetworkPolicy" in status["message"]
