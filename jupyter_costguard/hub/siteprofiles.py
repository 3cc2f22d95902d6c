"""The site's profiles: which one a server runs, whether it is a GPU one, and its price,
decided here once for the meter, the spawn hook, the budget hold, the culler and the pages.

`profile_prices` is the site's list. A spawn that names no profile runs the site's default
(`default_profile`, else the table's "" entry, else its first); a profile the table does not
list is refused at spawn, and a server found running one anyway (the hook was not installed
when it started) is counted fail-closed: a GPU server at the dearest listed rate. A profile is
a GPU one when its entry holds GPUs (`gpus`, else its instance's); `gpu_profiles`, the older
setting, may only add GPU profiles whose entry does not say (a plain `hourly_rate`), and is
the whole list on a site without a price table, where an unnamed profile is not a GPU one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from jupyter_costguard.hub.meter import MeterConfigError, ProfilePrice


@dataclass(frozen=True)
class SiteProfile:
    slug: str
    #: the GPUs one server of it holds (0: a CPU profile)
    gpus: int
    #: its price (None: not metered, what its servers report counts)
    price: ProfilePrice | None = None
    #: False: the site does not list it (refused at spawn, counted fail-closed)
    listed: bool = True
    #: the listed profile it is judged as by culling policies (itself, or for an unlisted
    #: one the dearest listed profile, whose price it is counted at)
    judged_as: str = ""

    @property
    def gpu(self) -> bool:
        return self.gpus > 0

    @property
    def policy_slug(self) -> str:
        return self.judged_as or self.slug


@dataclass(frozen=True)
class SiteProfiles:
    profiles: Mapping[str, SiteProfile]
    #: the profile a spawn that names none runs ("" where the site says nothing)
    default: str = ""
    #: whether the list is the price table (complete: unlisted profiles are refused)
    complete: bool = False

    def slug(self, asked: str | None) -> str:
        """The profile a spawn or a server's record that names `asked` runs."""
        return asked if asked else self.default

    def of(self, asked: str | None) -> SiteProfile:
        """The profile a server runs by the Hub's record of its spawn."""
        slug = self.slug(asked)
        found = self.profiles.get(slug)
        if found is not None:
            return found
        if not self.complete:  # a site without a price table: not a GPU profile it names
            return SiteProfile(slug, 0)
        priced = [p.price for p in self.profiles.values() if p.price is not None]
        dearest = max(priced, key=lambda p: p.rate_per_hour, default=None)
        most = max((p.gpus for p in self.profiles.values()), default=0)
        price = None if dearest is None else replace(
            dearest, profile=slug, detail=f"not a profile this site lists: counted at its "
                                          f"dearest, {dearest.profile!r} ({dearest.detail})")
        return SiteProfile(slug, max(1, most), price, listed=False,
                           judged_as=slug if dearest is None else dearest.profile)

    def refusal(self, asked: str | None) -> str | None:
        """Why a spawn of `asked` is refused (None: it is not)."""
        slug = self.slug(asked)
        if self.of(slug).listed:
            return None
        names = ", ".join(repr(s) for s in self.profiles if s) or "none"
        return (f"The profile {slug[:100]!r} is not one this hub offers (its profiles: "
                f"{names}). Choose one of those.")

    def rates(self, slugs: Collection[str]) -> dict[str, float]:
        """The meter's rate of each of `slugs` that is priced (unlisted ones fail-closed)."""
        out = {}
        for s in slugs:
            price = self.of(s).price
            if price is not None:
                out[s] = price.rate_per_hour
        return out


def site_profiles(prices: Mapping[str, ProfilePrice], *, gpu_profiles: Collection[str] = (),
                  default_profile: str = "") -> SiteProfiles:
    """The site's profiles from its settings (MeterConfigError where they contradict)."""
    profiles: dict[str, SiteProfile] = {}
    for slug, price in prices.items():
        if price.gpus == 0 and slug in gpu_profiles:
            raise MeterConfigError(
                f"c.CostGuardHub.gpu_profiles names {slug!r}, but its profile_prices entry "
                "holds no GPUs: say its GPUs in the entry (gpus) and drop gpu_profiles")
        gpus = price.gpus if price.gpus is not None else int(slug in gpu_profiles)
        profiles[slug] = SiteProfile(slug, gpus, price)
    complete = bool(prices)
    for slug in sorted(gpu_profiles):
        profiles.setdefault(slug, SiteProfile(slug, 1))
    if default_profile:
        if default_profile not in profiles:
            raise MeterConfigError(
                f"c.CostGuardHub.default_profile {default_profile!r} is not in profile_prices"
                f" (nor gpu_profiles): {', '.join(map(repr, profiles)) or 'none listed'}")
        default = default_profile
    elif "" in profiles or not complete:
        default = ""
    else:
        default = next(iter(prices))
    return SiteProfiles(profiles, default, complete)
