"""What the Kubernetes API server (or the JobSet and Trainer webhooks behind it) would refuse in a manifest, refused
here first in one line naming the option and the fix: object names, the image reference, the node and GPU counts.

The rules are Kubernetes' own: a DNS-1123 label (namespaces), a DNS-1123 subdomain (most object names), an RFC 1035
label (TrainJob names, JobSet names: they become Service names), at most 63 characters for a label value (the Kueue
queue), int32 for numNodes, numProcPerNode and parallelism, and an extended resource's name (an RDMA device).
"""

import re

from commbench.errors import CommbenchError

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
RFC1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
INT32_MAX = 2**31 - 1
IMAGE_MAX = 500
"""The TrainJob CRD's maxLength for spec.trainer.image; no real reference comes near it."""
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
"""The characters of a container image reference ([registry[:port]/]path[:tag][@digest]): no spaces or quotes."""
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
"""The name part of a qualified name (after the domain's '/'): at most 63 characters."""
RESERVED_RESOURCE_DOMAIN = "kubernetes.io"
"""Resource names in this domain (and under it) are Kubernetes' own; a device plugin's extended resource is not."""
QUOTA_PREFIX = "requests."
"""The API server refuses an extended resource named requests.*: ResourceQuota spells its requests that way."""

POD_NAME_SUFFIX = len("-abcde")
"""The random suffix the Job controller adds to a pod's name."""


def check_count(option: str, value: int) -> None:
    """A node or GPU count: 1 or more, and within the int32 the CRDs declare."""
    if value < 1:
        raise CommbenchError(f"{option} {value} is not a count the job can run with; use 1 or more")
    if value > INT32_MAX:
        raise CommbenchError(f"{option} {value} is beyond Kubernetes' int32 ({INT32_MAX}); use a smaller count")


def check_label(option: str, value: str, *, what: str) -> None:
    """A DNS-1123 label: a namespace."""
    if len(value) > LABEL_MAX or not DNS1123_LABEL.fullmatch(value):
        raise CommbenchError(f"{option} {value!r} is not {what} (a DNS-1123 label: at most {LABEL_MAX} lower-case "
                             f"letters, digits and '-', starting and ending with a letter or digit){_example(value)}")


def check_subdomain(option: str, value: str, *, what: str, max_length: int = SUBDOMAIN_MAX) -> None:
    """A DNS-1123 subdomain: a PersistentVolumeClaim, a runtime; max_length 63 where it is also a label value."""
    if len(value) > max_length or not DNS1123_SUBDOMAIN.fullmatch(value):
        raise CommbenchError(f"{option} {value!r} is not {what} (a DNS-1123 subdomain: at most {max_length} "
                             "lower-case letters, digits, '-' and '.', each dot-separated part starting and ending "
                             f"with a letter or digit){_example(value)}")


def check_job_name(option: str, value: str, *, nodes: int) -> None:
    """The TrainJob's or JobSet's name: an RFC 1035 label (the Trainer's rule; JobSet makes it a Service name), short
    enough that the pod names made from it (<name>-node-0-<index>-abcde) stay within 63 characters, which the JobSet
    webhook checks (for a TrainJob too: the Trainer makes a JobSet of the same name)."""
    longest = job_name_max(nodes)
    if not RFC1035_LABEL.fullmatch(value) or len(value) > LABEL_MAX:
        raise CommbenchError(f"{option} {value!r} is not a job name (an RFC 1035 label: lower-case letters, digits "
                             f"and '-', starting with a letter, ending with a letter or digit){_example(value)}")
    if len(value) > longest:
        raise CommbenchError(f"{option} {value!r} is {len(value)} characters long; with {nodes} node(s) its pod "
                             f"names {value}-node-0-{nodes - 1}-xxxxx would pass 63 characters: use at most "
                             f"{longest}")


def job_name_max(nodes: int) -> int:
    """The longest job name whose last pod name, <name>-node-0-<nodes - 1>-abcde, is a 63-character label."""
    return LABEL_MAX - len("-node-0-") - len(str(nodes - 1)) - POD_NAME_SUFFIX


def check_image(value: str) -> None:
    if not value.strip():
        raise CommbenchError("--image is empty; give the container image with commbench and torch installed, e.g. "
                             "--image ghcr.io/you/commbench:1.0")
    if len(value) > IMAGE_MAX or not _IMAGE.fullmatch(value):
        raise CommbenchError(f"--image {value!r} is not a container image reference (letters, digits and ._/:@-, "
                             f"no spaces or quotes, at most {IMAGE_MAX} characters); e.g. ghcr.io/you/commbench:1.0")


def check_extended_resource(option: str, value: str, *, gpu_resource: str) -> None:
    """A device plugin's resource, as a container's limits name it: DOMAIN/NAME (a DNS-1123 subdomain outside
    kubernetes.io, '/', a qualified name part), e.g. rdma/ib or nvidia.com/hostdev; not the GPUs' own resource."""
    domain, slash, name = value.partition("/")
    example = "; e.g. rdma/ib (the RDMA shared device plugin) or nvidia.com/hostdev (SR-IOV)"
    if not slash or not domain:
        raise CommbenchError(f"{option} {value!r} is not an extended resource name: it needs the device plugin's "
                             f"domain, DOMAIN/NAME{example}")
    if len(domain) > SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.fullmatch(domain):
        raise CommbenchError(f"{option} {value!r}: its domain {domain!r} is not a DNS-1123 subdomain (lower-case "
                             f"letters, digits, '-' and '.'){example}")
    if len(name) > LABEL_MAX or not QUALIFIED_NAME_PART.fullmatch(name):
        raise CommbenchError(f"{option} {value!r}: its name {name!r} is not a qualified name (at most {LABEL_MAX} "
                             f"letters, digits, '-', '_' and '.', starting and ending with a letter or digit, no "
                             f"second '/'){example}")
    if domain == RESERVED_RESOURCE_DOMAIN or domain.endswith("." + RESERVED_RESOURCE_DOMAIN) \
            or value.startswith(QUOTA_PREFIX):
        raise CommbenchError(f"{option} {value!r} is a name Kubernetes keeps for itself, not a device plugin's "
                             f"resource{example}")
    if value == gpu_resource:
        raise CommbenchError(f"{option} {value!r} is the GPUs' resource, which --gpus-per-node sets; name the RDMA "
                             f"device's own resource{example}")


def as_label(text: str, *, max_length: int = LABEL_MAX) -> str:
    """text made into a DNS-1123 label (lower case, runs of anything else as one '-'), cut to max_length; may be
    empty. Default names are made with it; a refusal suggests it."""
    label = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return label[:max_length].rstrip("-")


def _example(value: str) -> str:
    suggestion = as_label(value)
    if suggestion and suggestion[0].isalpha() and suggestion != value:
        return f"; e.g. {suggestion!r}"
    return ""
