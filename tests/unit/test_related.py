"""A watched object's change wakes exactly the gangs it concerns (webhook/controller/observe/related.py)."""

from __future__ import annotations

from webhook.controller.observe.related import RelatedObjects

JOBS, PODGROUPS = ("batch/v1", "jobs"), ("scheduling.volcano.sh/v1beta1", "podgroups")


def key(resource: tuple[str, str], name: str) -> tuple[str, str, str]:
    return (*resource, f"team-a/{name}")


def test_a_change_wakes_the_gangs_of_that_object_and_no_other() -> None:
    related = RelatedObjects()
    related.note("team-a/job-a", 1, lambda: [key(JOBS, "a"), key(PODGROUPS, "job-a")])
    related.note("team-a/job-b", 1, lambda: [key(JOBS, "b"), key(PODGROUPS, "job-b")])
    assert related.touched([key(JOBS, "a")]) == {"team-a/job-a"}
    assert related.touched([key(PODGROUPS, "job-b"), key(JOBS, "elsewhere")]) == {"team-a/job-b"}
    assert related.touched([]) == set()


def test_a_gangs_objects_are_worked_out_again_only_when_its_pods_changed() -> None:
    related, asked = RelatedObjects(), []

    def keys(name: str) -> list[tuple[str, str, str]]:
        asked.append(name)
        return [key(JOBS, name)]

    related.note("team-a/job-a", 1, lambda: keys("a"))
    related.note("team-a/job-a", 1, lambda: keys("ignored"))  # pods unchanged: not asked again
    assert asked == ["a"]
    related.note("team-a/job-a", 2, lambda: keys("renamed"))  # its pods now say another workload
    assert related.touched([key(JOBS, "a")]) == set()
    assert related.touched([key(JOBS, "renamed")]) == {"team-a/job-a"}


def test_a_gang_gone_is_woken_by_nothing() -> None:
    related = RelatedObjects()
    related.note("team-a/job-a", 1, lambda: [key(JOBS, "a")])
    related.keep_only([])
    assert related.touched([key(JOBS, "a")]) == set()
