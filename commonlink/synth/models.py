"""Procedural object models for the offline renderer: everyday things built from a few coloured parts.

Every builder returns one ``trimesh.Trimesh`` with per-vertex colours, in centimetres, z up, resting on
z = 0 and centred on the z axis (the pivot convention the scene planner and the UnrealCV asset file share).
The primitives live in :mod:`commonlink.synth.shapes`; more household models in
:mod:`commonlink.synth.models_household`. :data:`PROCEDURAL_MODELS` lists them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from commonlink.synth.models_household import HOUSEHOLD_MODELS
from commonlink.synth.shapes import (
    BLUE,
    BROWN,
    CREAM,
    DARK,
    DARK_GREEN,
    DARK_RED,
    GOLD,
    GREEN,
    GREY,
    LIGHT_BLUE,
    ORANGE,
    PINK,
    PURPLE,
    RED,
    SILVER,
    TAN,
    TERRACOTTA,
    WHITE,
    WOOD,
    YELLOW,
    box,
    capsule_between,
    combine,
    cone,
    cylinder,
    lathe,
    part,
    ridged_sphere,
    rotated,
    sphere,
    torus,
    trimesh_module,
    upper_half,
)

# --- the models -------------------------------------------------------------------------------------------


def apple():
    # Apple profile: round, a little wider above the middle, dimpled at the top and the bottom.
    t = np.linspace(0, math.pi, 25)
    r = 4.5 * np.sin(t) * (1 + 0.08 * np.sin(t - 0.4))
    z = 3.8 * (1 - np.cos(t))
    z = z - 0.9 * np.exp(-(((t - math.pi) / 0.35) ** 2)) + 0.5 * np.exp(-((t / 0.35) ** 2))
    r[0] = r[-1] = 0.0
    body = lathe(list(zip(r, z)), RED)
    stem = capsule_between([0, 0, 6.4], [0.4, 0.2, 9.0], 0.28, BROWN)
    leaf = sphere(1.0, GREEN, x=1.3, y=0.3, z=8.1, scale=(1.6, 0.7, 0.25))
    return combine(body, stem, leaf)


def orange():
    return combine(sphere(4.0, ORANGE, z=4.0, scale=(1, 1, 0.95)), cylinder(0.35, 0.6, DARK_GREEN, z=7.7))


def banana():
    pieces = []
    n = 9
    for i in range(n):
        a0, a1 = -0.9 + 1.8 * i / n, -0.9 + 1.8 * (i + 1) / n
        p0 = [9 * math.sin(a0), 0, 9 * (1 - math.cos(a0))]
        p1 = [9 * math.sin(a1), 0, 9 * (1 - math.cos(a1))]
        r = 2.3 * (1 - 0.5 * abs((i + 0.5) / n - 0.5) * 2)
        color = BROWN if i in (0, n - 1) else YELLOW
        pieces.append(capsule_between(p0, p1, r, color))
    return combine(*pieces)


def bowl():
    outer = [(0, 0), (3.5, 0), (3.6, 0.8), (6.5, 2.5), (8.0, 5.0), (8.3, 6.0)]
    inner = [(7.8, 6.0), (7.4, 5.0), (6.0, 3.0), (3.0, 1.6), (0, 1.4)]
    return combine(lathe(outer + inner, BLUE, sections=48))


def plate():
    profile = [(0, 0), (6, 0), (6.5, 0.5), (10.5, 1.3), (11, 1.6), (10.6, 1.7), (6.0, 0.9), (0, 0.9)]
    return combine(
        lathe(profile, WHITE, sections=48),
        lathe([(10.2, 1.62), (10.7, 1.66), (10.7, 1.72), (10.2, 1.70)], BLUE, sections=48),
    )


def cup():
    body = lathe([(0, 0), (3.0, 0), (3.2, 0.3), (4.2, 8.5), (3.9, 8.5), (2.9, 0.8), (0, 0.8)], WHITE, sections=40)
    sleeve = lathe([(3.45, 2.2), (3.95, 6.5), (3.98, 6.5), (3.48, 2.2)], BROWN, sections=40)
    lid = lathe([(0, 8.4), (4.4, 8.4), (4.4, 9.2), (3.6, 10.0), (0, 10.0)], DARK, sections=40)
    return combine(body, sleeve, lid)


def teacup():
    body = lathe(
        [(0, 0), (2.2, 0), (2.3, 0.5), (4.2, 3.0), (4.8, 5.6), (4.5, 5.6), (3.9, 3.2), (2.0, 1.0), (0, 1.0)], WHITE
    )
    handle = rotated(torus(1.6, 0.38, WHITE), "x", 90)
    handle.apply_translation([5.2, 0, 3.4])
    saucer = lathe([(0, 0), (4.5, 0), (7.0, 0.8), (7.2, 1.0), (4.5, 0.6), (0, 0.6)], LIGHT_BLUE)
    body.apply_translation([0, 0, 0.6])
    return combine(saucer, body, handle)


def bottle():
    glass = lathe(
        [(0, 0), (3.6, 0), (3.8, 0.5), (3.8, 15), (3.2, 18), (1.4, 21), (1.3, 24), (0, 24)], GREEN, sections=36
    )
    label = lathe([(3.85, 5), (3.85, 11), (3.87, 11), (3.87, 5)], CREAM, sections=36)
    cap = cylinder(1.5, 1.6, GOLD, z=23.5)
    return combine(glass, label, cap)


def soda_can():
    body = lathe([(0, 0), (2.6, 0), (3.3, 0.8), (3.3, 10.6), (2.7, 11.6), (0, 11.6)], RED, sections=40)
    top = lathe([(0, 11.55), (2.7, 11.55), (2.7, 11.8), (0, 11.8)], SILVER, sections=40)
    bottom = lathe([(0, -0.01), (2.6, -0.01), (3.31, 0.8), (3.31, 1.0), (0, 1.0)], SILVER, sections=40)
    stripe = lathe([(3.32, 5.0), (3.32, 6.5), (3.34, 6.5), (3.34, 5.0)], WHITE, sections=40)
    return combine(body, top, bottom, stripe)


def book():
    cover = box(15, 22, 3.2, BLUE)
    pages = box(14.2, 21.4, 2.6, CREAM, x=0.45, z=0.3)
    spine_band = box(0.3, 22.02, 0.8, GOLD, x=-7.5, z=1.2)
    return combine(cover, pages, spine_band)


def cardboard_box():
    body = box(24, 18, 16, TAN)
    tape = box(4, 18.2, 0.2, (215, 200, 160), z=15.95)
    tape2 = box(4, 0.2, 6, (215, 200, 160), y=9.05, z=10)
    tape3 = box(4, 0.2, 6, (215, 200, 160), y=-9.05, z=10)
    return combine(body, tape, tape2, tape3)


def gift_box():
    body = box(16, 16, 12, RED)
    ribbon_a = box(2.5, 16.3, 12.3, GOLD, z=-0.15)
    ribbon_b = box(16.3, 2.5, 12.3, GOLD, z=-0.15)
    bow1 = rotated(torus(2.0, 0.6, GOLD), "x", 90)
    bow1.apply_translation([-2, 0, 13.5])
    bow2 = rotated(torus(2.0, 0.6, GOLD), "x", 90)
    bow2.apply_translation([2, 0, 13.5])
    return combine(body, ribbon_a, ribbon_b, bow1, bow2)


def tennis_ball():
    ball = sphere(3.3, (200, 225, 60), z=3.3)
    seam = rotated(torus(3.28, 0.18, WHITE), "x", 70)
    seam.apply_translation([0, 0, 3.3])
    return combine(ball, seam)


def basketball():
    ball = sphere(12, ORANGE, z=12)
    lines = []
    for axis, deg in (("x", 90), ("y", 90), ("z", 0)):
        ring = rotated(torus(12.0, 0.3, DARK), axis, deg)
        ring.apply_translation([0, 0, 12])
        lines.append(ring)
    return combine(ball, *lines)


def traffic_cone():
    base = box(28, 28, 2.5, DARK)
    body = lathe([(0, 2.5), (11, 2.5), (2.2, 42), (0, 42)], ORANGE)
    stripe = lathe([(6.2, 20), (4.6, 28), (4.62, 28), (6.22, 20)], WHITE)
    stripe2 = lathe([(8.6, 10), (7.6, 15), (7.62, 15), (8.62, 10)], WHITE)
    return combine(base, body, stripe, stripe2)


def vase():
    profile = [
        (0, 0),
        (4, 0),
        (7.5, 6),
        (8, 12),
        (6, 19),
        (3.5, 23),
        (3.6, 26),
        (4.6, 28),
        (4.2, 28.3),
        (3.0, 26),
        (0, 26),
    ]
    return combine(
        lathe(profile, PURPLE, sections=48), lathe([(8.02, 11), (7.9, 13), (7.92, 13), (8.04, 11)], GOLD, sections=48)
    )


def candle():
    holder = lathe([(0, 0), (5, 0), (5, 0.8), (3.2, 1.4), (3.2, 2.4), (0, 2.4)], GOLD)
    wax = cylinder(2.6, 13, CREAM, z=2.3)
    wick = cylinder(0.15, 1.0, DARK, z=15.2)
    flame = sphere(0.7, (255, 190, 40), z=17.0, scale=(1, 1, 2.0))
    return combine(holder, wax, wick, flame)


def table_lamp():
    base = lathe([(0, 0), (7, 0), (7, 1.2), (2, 2.5), (0, 2.5)], DARK)
    pole = cylinder(0.8, 26, SILVER, z=2.4)
    shade = lathe([(11, 20), (6, 36), (5.6, 36), (10.6, 20)], CREAM, sections=48)
    bulb = sphere(2.5, (255, 240, 180), z=26)
    return combine(base, pole, shade, bulb)


def chair():
    legs = [box(3, 3, 44, WOOD, x=sx * 19, y=sy * 19) for sx in (-1, 1) for sy in (-1, 1)]
    seat = box(44, 44, 4, RED, z=44)
    back_posts = [box(3, 3, 42, WOOD, x=sx * 19, y=-20.5, z=48) for sx in (-1, 1)]
    back = box(41, 3, 16, RED, y=-20.5, z=72)
    return combine(*legs, seat, *back_posts, back)


def stool():
    seat = cylinder(16, 4, WOOD, z=46)
    legs = []
    for k in range(3):
        ang = 2 * math.pi * k / 3
        legs.append(
            capsule_between(
                [14 * math.cos(ang), 14 * math.sin(ang), 0], [9 * math.cos(ang), 9 * math.sin(ang), 46], 1.4, DARK
            )
        )
    ring = torus(11.5, 0.7, DARK, z=18)
    return combine(seat, *legs, ring)


def donut():
    dough = torus(4.2, 2.2, TAN, z=2.2)
    icing = torus(4.2, 2.0, PINK, z=2.6)
    sprinkles = []
    rng = np.random.default_rng(7)
    for _ in range(28):
        ang = rng.uniform(0, 2 * math.pi)
        rad = 4.2 + rng.uniform(-1.4, 1.4)
        color = [YELLOW, BLUE, WHITE, GREEN][int(rng.integers(4))]
        sprinkles.append(box(0.9, 0.3, 0.3, color, x=rad * math.cos(ang), y=rad * math.sin(ang), z=4.35))
    return combine(dough, icing, *sprinkles)


def dice():
    cube = box(8, 8, 8, WHITE)
    pips = []

    def pip(x, y, z):
        pips.append(sphere(0.75, DARK, x=x, y=y, z=z, subdivisions=2))

    s, c = 2.2, 4.0
    pip(0, 0, 8.0)  # top: 1
    for a, b in ((-s, -s), (s, s), (-s, s), (s, -s), (0, 0)):  # +x face: 5
        pip(c, a, c + b)
    for a in (-s, 0, s):  # -y face: 3 on a diagonal
        pip(a, -c, c + a)
    for a, b in ((-s, -s), (s, s)):  # +y face: 2
        pip(a, c, c + b)
    return combine(cube, *pips)


def mushroom():
    stem = lathe([(0, 0), (2.2, 0), (1.8, 4), (1.9, 7), (0, 7)], CREAM)
    cap = lathe([(0, 12), (3.5, 11.3), (5.8, 9.3), (6.4, 7.0), (1.5, 6.5), (0, 6.5)], RED, sections=48)
    dots = []
    for k in range(7):
        ang = 2 * math.pi * k / 7
        dots.append(
            sphere(0.7, WHITE, x=4.2 * math.cos(ang), y=4.2 * math.sin(ang), z=10.3, scale=(1, 1, 0.5), subdivisions=2)
        )
    dots.append(sphere(0.8, WHITE, z=11.9, scale=(1, 1, 0.5), subdivisions=2))
    return combine(stem, cap, *dots)


def pyramid():
    tm = trimesh_module()
    verts = np.array([[-8, -8, 0], [8, -8, 0], [8, 8, 0], [-8, 8, 0], [0, 0, 11]], float)
    faces = np.array([[0, 2, 1], [0, 3, 2], [0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]])
    return combine(part(tm.Trimesh(verts, faces), (215, 185, 120)))


def ring():
    band = torus(1.4, 0.28, GOLD)
    band = rotated(band, "x", 90)
    band.apply_translation([0, 0, 1.68])
    gem = sphere(0.55, (90, 170, 255), z=3.3, subdivisions=1)
    return combine(band, gem)


def hammer():
    handle = rotated(cylinder(1.2, 26, WOOD), "y", 90)
    handle.apply_translation([0, 0, 1.5])
    head = box(3, 10, 3, GREY, x=13, z=0)
    claw = box(3, 4, 3, GREY, x=13, y=-6.5, z=0.5)
    grip = rotated(cylinder(1.35, 9, DARK), "y", 90)
    grip.apply_translation([-8.5, 0, 1.5])
    return combine(handle, head, claw, grip)


def wine_glass():
    profile = [
        (0, 0),
        (3.5, 0),
        (3.5, 0.3),
        (0.5, 0.6),
        (0.45, 9),
        (2.0, 10),
        (3.8, 13),
        (4.0, 18),
        (3.8, 18),
        (3.6, 13.5),
        (0, 11),
    ]
    glass = lathe(profile, (190, 215, 230), sections=40)
    wine = lathe([(0, 11.1), (3.55, 13.6), (3.75, 15.0), (0, 15.0)], DARK_RED, sections=40)
    return combine(glass, wine)


def teapot():
    body = lathe([(0, 0), (5, 0), (7.5, 3), (8, 6), (6.5, 10), (3.5, 11), (0, 11)], (60, 130, 120), sections=48)
    lid_knob = sphere(1.2, (60, 130, 120), z=12)
    spout = capsule_between([6.5, 0, 4], [12, 0, 10], 1.1, (60, 130, 120))
    handle = rotated(torus(3.5, 0.7, (60, 130, 120)), "x", 90)
    handle.apply_translation([-8, 0, 6])
    return combine(body, lid_knob, spout, handle)


def flower_pot():
    pot = lathe([(0, 0), (6, 0), (8.5, 13), (9.2, 13.2), (9.2, 15), (8.4, 15), (0, 14)], TERRACOTTA)
    soil = cylinder(8.2, 0.5, BROWN, z=14)
    stems, blooms = [], []
    for k, color in enumerate([RED, YELLOW, PINK, PURPLE, ORANGE]):
        ang = 2 * math.pi * k / 5
        top = [3.5 * math.cos(ang), 3.5 * math.sin(ang), 26 + 3 * (k % 2)]
        stems.append(capsule_between([0, 0, 14], top, 0.35, DARK_GREEN))
        blooms.append(sphere(2.2, color, x=top[0], y=top[1], z=top[2], subdivisions=2))
    return combine(pot, soil, *stems, *blooms)


def cactus():
    pot = lathe([(0, 0), (5, 0), (6.5, 9), (0, 9)], TERRACOTTA)
    trunk = capsule_between([0, 0, 8], [0, 0, 30], 3.2, GREEN)
    arm1 = capsule_between([0, 0, 17], [7, 0, 19], 1.8, GREEN)
    arm1b = capsule_between([7, 0, 19], [7, 0, 26], 1.8, GREEN)
    arm2 = capsule_between([0, 0, 21], [-6, 0, 22], 1.6, GREEN)
    arm2b = capsule_between([-6, 0, 22], [-6, 0, 28], 1.6, GREEN)
    flower = sphere(1.4, PINK, z=33.2, subdivisions=2)
    return combine(pot, trunk, arm1, arm1b, arm2, arm2b, flower)


def top_hat():
    brim = cylinder(15, 1.0, DARK)
    crown = lathe([(0, 1), (9.5, 1), (10, 17), (0, 17)], DARK)
    band = lathe([(9.55, 1.5), (9.7, 5), (9.72, 5), (9.57, 1.5)], RED)
    return combine(brim, crown, band)


def bucket():
    body = lathe([(0, 0), (9, 0), (12, 22), (11.5, 22), (8.6, 0.8), (0, 0.8)], (40, 120, 200), sections=48)
    handle = rotated(torus(12.0, 0.35, SILVER), "x", 90)
    handle.apply_translation([0, 0, 20])
    return combine(body, upper_half(handle, 20.2))


def carrot():
    root = rotated(cone(3.4, 17, ORANGE), "y", 90)
    root.apply_translation([-8, 0, 3.4])
    leaves = [
        capsule_between([-8, 0, 3.4], [-14, dy, 3.4 + dz], 0.7, GREEN)
        for dy, dz in ((-1.5, 2), (0, 3), (1.5, 2), (0.5, 0.5))
    ]
    return combine(root, *leaves)


def egg():
    # Egg curve: an ellipse whose radius shrinks towards the top.
    t = np.linspace(0, math.pi, 25)
    z = 3.5 * (1 - np.cos(t))
    r = 2.6 * np.sin(t) * (1 - 0.12 * (z / 7.0))
    r[0] = r[-1] = 0.0
    return combine(lathe(list(zip(r, z)), CREAM, sections=40))


def teddy_bear():
    fur, light = (150, 95, 55), (215, 175, 125)
    body = sphere(6.0, fur, z=7.5, scale=(0.95, 0.85, 1.15))
    belly = sphere(4.2, light, x=2.6, z=7.0, scale=(0.5, 0.85, 1.05))
    head = sphere(4.6, fur, z=17.5)
    ears = [sphere(1.6, fur, y=s * 3.5, z=21.2, scale=(0.6, 1, 1)) for s in (-1, 1)]
    muzzle = sphere(1.9, light, x=3.9, z=16.6, scale=(0.8, 1, 0.8))
    nose = sphere(0.6, DARK, x=5.3, z=17.2, subdivisions=2)
    eyes = [sphere(0.5, DARK, x=3.8, y=s * 1.6, z=18.9, subdivisions=2) for s in (-1, 1)]
    arms = [capsule_between([0.5, s * 4.8, 11], [3.0, s * 6.5, 6.5], 1.7, fur) for s in (-1, 1)]
    legs = [capsule_between([1.0, s * 3.0, 2.5], [6.0, s * 3.8, 2.2], 2.1, fur) for s in (-1, 1)]
    paws = [sphere(1.5, light, x=7.6, y=s * 3.8, z=2.3, scale=(0.4, 1, 1)) for s in (-1, 1)]
    return combine(body, belly, head, *ears, muzzle, nose, *eyes, *arms, *legs, *paws)


def pear():
    body = lathe(
        [(0, 0), (3.2, 0.3), (4.4, 2.4), (4.0, 5.0), (2.4, 7.4), (1.8, 9.2), (0.9, 10.4), (0, 10.6)], (170, 195, 60)
    )
    stem = capsule_between([0, 0, 10.2], [0.5, 0, 12.5], 0.25, BROWN)
    return combine(body, stem)


def dumbbell():
    bar = rotated(cylinder(1.2, 30, SILVER), "y", 90)
    bar.apply_translation([0, 0, 6])
    plates = []
    for x in (-11, -8.5, 8.5, 11):
        plate_ = rotated(cylinder(6, 2.2, DARK), "y", 90)
        plate_.apply_translation([x, 0, 6])
        plates.append(plate_)
    return combine(bar, *plates)


def toy_car():
    body = box(20, 9, 4.5, RED, z=2.2)
    cabin = box(10, 8, 4, LIGHT_BLUE, x=-1, z=6.7)
    roof = box(10.4, 8.4, 0.6, RED, x=-1, z=10.5)
    wheels = []
    for wx in (-6.5, 6.5):
        for wy in (-4.6, 4.6):
            wheel = rotated(cylinder(2.4, 1.6, DARK), "x", 90)
            wheel.apply_translation([wx, wy, 2.4])
            wheels.append(wheel)
    lights = [box(0.3, 1.6, 1.0, YELLOW, x=10.05, y=s * 3, z=4.4) for s in (-1, 1)]
    return combine(body, cabin, roof, *wheels, *lights)


def toy_house():
    tm = trimesh_module()
    walls = box(16, 14, 11, CREAM)
    verts = np.array([[-9, -8, 11], [9, -8, 11], [9, 8, 11], [-9, 8, 11], [-9, 0, 18], [9, 0, 18]], float)
    faces = np.array([[0, 1, 5], [0, 5, 4], [2, 3, 4], [2, 4, 5], [0, 4, 3], [1, 2, 5], [0, 3, 2], [0, 2, 1]])
    roof = part(tm.Trimesh(verts, faces), DARK_RED)
    door = box(0.3, 3.5, 6, BROWN, x=8.05)
    windows = [box(0.3, 3, 3, LIGHT_BLUE, x=8.05, y=s * 4.5, z=5) for s in (-1, 1)]
    chimney = box(2.5, 2.5, 5, TERRACOTTA, x=4, y=3, z=14.5)
    return combine(walls, roof, door, *windows, chimney)


def rocket():
    body = lathe([(0, 4), (3.2, 4), (3.4, 18), (2.4, 24), (0, 28)], WHITE)
    nozzle = lathe([(0, 4.2), (2.0, 4.2), (2.6, 1.5), (0, 1.5)], GREY)
    fins = [box(0.6, 6, 7, RED, x=3.0 * math.cos(a), y=3.0 * math.sin(a), z=0) for a in (0, math.pi)]
    fins += [
        box(6, 0.6, 7, RED, x=3.0 * math.cos(a + math.pi / 2), y=3.0 * math.sin(a + math.pi / 2), z=0)
        for a in (0, math.pi)
    ]
    window = sphere(1.3, LIGHT_BLUE, x=3.1, z=17, scale=(0.4, 1, 1), subdivisions=2)
    band = lathe([(3.45, 11), (3.45, 12.5), (3.47, 12.5), (3.47, 11)], RED)
    return combine(body, nozzle, *fins, window, band)


def lollipop():
    stick = cylinder(0.35, 14, WHITE)
    candy = rotated(cylinder(4.5, 1.6, (230, 60, 140), sections=40), "x", 90)
    candy.apply_translation([0, 0, 17])
    swirl = rotated(torus(2.6, 0.5, WHITE), "x", 90)
    swirl.apply_translation([0, 0.85, 17])
    return combine(stick, candy, swirl)


def ice_cream():
    cone_ = rotated(cone(3.2, 11, TAN), "x", 180)
    cone_.apply_translation([0, 0, 11])
    scoop = sphere(3.8, PINK, z=13.0)
    cherry = sphere(0.9, RED, z=17.3, subdivisions=2)
    return combine(cone_, scoop, cherry)


def burger():
    bottom_bun = lathe([(0, 0), (5.5, 0), (6, 0.8), (6, 2.0), (0, 2.0)], TAN)
    patty = cylinder(6.2, 1.6, BROWN, z=2.0)
    cheese = box(10.5, 10.5, 0.35, YELLOW, z=3.6)
    lettuce = cylinder(6.6, 0.5, GREEN, z=3.95)
    tomato = cylinder(5.6, 0.7, RED, z=4.45)
    top_bun = lathe([(0, 5.15), (6.0, 5.15), (6.1, 5.2), (5.6, 7.0), (3.5, 8.4), (0, 8.8)], (215, 150, 70))
    seeds = [
        sphere(0.35, CREAM, x=3.5 * math.cos(a), y=3.5 * math.sin(a), z=8.1, scale=(1.6, 1, 0.6), subdivisions=1)
        for a in np.linspace(0, 2 * math.pi, 7)[:-1]
    ]
    return combine(bottom_bun, patty, cheese, lettuce, tomato, top_bun, *seeds)


def cake():
    sponge = cylinder(9, 7, (240, 220, 190))
    frosting = cylinder(9.2, 1.3, WHITE, z=7)
    cherries = [
        sphere(1.0, RED, x=6.5 * math.cos(a), y=6.5 * math.sin(a), z=8.9, subdivisions=2)
        for a in np.linspace(0, 2 * math.pi, 9)[:-1]
    ]
    candle_ = cylinder(0.45, 5, LIGHT_BLUE, z=8.3)
    flame = sphere(0.5, (255, 190, 40), z=13.8, scale=(1, 1, 1.8), subdivisions=2)
    stripe = lathe([(9.05, 3.0), (9.05, 4.0), (9.07, 4.0), (9.07, 3.0)], PINK, sections=48)
    return combine(sponge, frosting, *cherries, candle_, flame, stripe)


def pumpkin():
    body = ridged_sphere(10, ORANGE, ridges=8, depth=0.07, z_scale=0.72, z=7.2)
    stem = capsule_between([0, 0, 13.5], [0.8, 0.3, 17], 0.9, (90, 110, 40))
    return combine(body, stem)


def snowman():
    base = sphere(7, WHITE, z=6.5)
    middle = sphere(5, WHITE, z=16)
    head = sphere(3.5, WHITE, z=23.5)
    nose = rotated(cone(0.6, 3.2, ORANGE, sections=16), "y", 90)
    nose.apply_translation([3.3, 0, 23.8])
    eyes = [sphere(0.45, DARK, x=3.05, y=s * 1.2, z=24.9, subdivisions=1) for s in (-1, 1)]
    buttons = [sphere(0.6, DARK, x=4.85, z=z, subdivisions=1) for z in (14.5, 16.5, 18.4)]
    hat_brim = cylinder(4.0, 0.5, DARK, z=26.2)
    hat = cylinder(2.6, 4.0, DARK, z=26.6)
    scarf = torus(3.6, 0.8, RED, z=20.4)
    return combine(base, middle, head, nose, *eyes, *buttons, hat_brim, hat, scarf)


def alarm_clock():
    case = rotated(cylinder(6, 4.5, RED, sections=40), "x", 90)
    case.apply_translation([0, 0, 8])
    dial = rotated(cylinder(5.0, 0.3, WHITE, sections=40), "x", 90)
    dial.apply_translation([0, -2.3, 8])
    hands = [box(0.5, 0.3, 3.8, DARK, y=-2.5, z=8), box(2.8, 0.3, 0.5, DARK, x=1.4, y=-2.5, z=7.8)]
    bells = [sphere(2.2, GOLD, x=s * 3.6, z=13.6, scale=(1, 1, 0.75), subdivisions=2) for s in (-1, 1)]
    hammer_ = box(0.6, 0.6, 2.2, SILVER, z=14.0)
    feet = [capsule_between([s * 3.6, 0, 0.5], [s * 3.0, 0, 3.2], 0.6, DARK) for s in (-1, 1)]
    return combine(case, dial, *hands, *bells, hammer_, *feet)


def watering_can():
    body = cylinder(6, 12, GREEN)
    spout = capsule_between([5, 0, 3], [15, 0, 13], 0.9, GREEN)
    rose = rotated(cone(2.0, 2.0, GREEN, sections=20), "y", -45)
    rose.apply_translation([15, 0, 13])
    handle = rotated(torus(5, 0.8, DARK_GREEN), "x", 90)
    handle.apply_translation([-1, 0, 12])
    return combine(body, spout, rose, upper_half(handle, 12))


#: Procedural model name -> builder. Asset files refer to these as ``procedural:<name>``.
PROCEDURAL_MODELS: dict[str, Callable] = {
    fn.__name__: fn
    for fn in (
        apple,
        orange,
        banana,
        bowl,
        plate,
        cup,
        teacup,
        bottle,
        soda_can,
        book,
        cardboard_box,
        gift_box,
        tennis_ball,
        basketball,
        traffic_cone,
        vase,
        candle,
        table_lamp,
        chair,
        stool,
        donut,
        dice,
        mushroom,
        pyramid,
        ring,
        hammer,
        wine_glass,
        teapot,
        flower_pot,
        cactus,
        top_hat,
        bucket,
        carrot,
        egg,
        pear,
        dumbbell,
        toy_car,
        toy_house,
        rocket,
        lollipop,
        ice_cream,
        burger,
        cake,
        pumpkin,
        snowman,
        alarm_clock,
        watering_can,
        teddy_bear,
    )
}
PROCEDURAL_MODELS.update(HOUSEHOLD_MODELS)
