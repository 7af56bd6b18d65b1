"""More procedural household objects (kitchen, food, home, office, toys) for the offline renderer.

Same conventions as :mod:`commonlink.synth.models`: centimetres, z up, resting on z = 0, centred on the z axis,
per-vertex colours. Named in the asset file in the Common-O vocabulary style ("measuring cup", "silver whisk",
"mallard (fake duck)"); colour variants are separate types only where the name says so ("gold jigger",
"silver jigger").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

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
    RED,
    SILVER,
    TERRACOTTA,
    WHITE,
    WOOD,
    YELLOW,
    box,
    capsule_between,
    combine,
    cone,
    cylinder,
    faces_where,
    lathe,
    moved,
    part,
    ridged_sphere,
    rotated,
    sphere,
    torus,
    trimesh_module,
    upper_half,
)

GLASS = (185, 215, 225)
STEEL = (175, 178, 185)
LEMON = (250, 220, 50)
LIME = (120, 190, 50)


def _handle(major: float, minor: float, color, x: float, z: float):
    """A C-shaped side handle (half a torus standing in the xz plane, opening towards -x)."""
    ring = rotated(torus(major, minor, color), "x", 90)
    ring.apply_translation([x, 0, z])
    return faces_where(ring, ring.triangles_center[:, 0] >= x - 0.2 * major)


# --- kitchen ---------------------------------------------------------------------------------------------------


def measuring_cup():
    body = lathe([(0, 0), (4.2, 0), (4.6, 0.4), (5.2, 9.0), (4.9, 9.0), (4.3, 0.8), (0, 0.8)], GLASS)
    marks = [lathe([(5.0, z), (5.0, z + 0.25), (5.02, z + 0.25), (5.02, z)], RED) for z in (3.0, 5.0, 7.0)]
    spout = box(1.6, 2.4, 0.6, GLASS, x=-5.2, z=8.6)
    return combine(body, *marks, spout, _handle(3.0, 0.55, RED, 5.0, 5.0))


def _whisk(color):
    handle = cylinder(1.0, 11, color)
    cap = sphere(1.0, color, z=0.0, subdivisions=2)
    wires = []
    for k in range(6):
        loop = rotated(torus(3.2, 0.16, color), "x", 90)
        loop.apply_transform(trimesh_module().transformations.rotation_matrix(math.pi * k / 6, [0, 0, 1]))
        loop.apply_scale([1, 1, 2.3])
        loop.apply_translation([0, 0, 11 + 7.0])
        wires.append(upper_half(loop, 11.5))
    return combine(cap, handle, *wires)


def silver_whisk():
    return _whisk(SILVER)


def _jigger(color):
    return combine(
        lathe(
            [(0, 0), (2.6, 0), (2.6, 0.3), (1.0, 5.0), (2.2, 5.1), (2.9, 10.5), (2.6, 10.5), (1.2, 5.6), (0, 5.6)],
            color,
        )
    )


def gold_jigger():
    return _jigger(GOLD)


def silver_jigger():
    return _jigger(SILVER)


def salt_shaker():
    body = lathe([(0, 0), (2.6, 0), (2.7, 6.5), (2.4, 7.2), (0, 7.2)], GLASS)
    cap = lathe([(0, 7.0), (2.5, 7.0), (2.5, 8.4), (2.0, 9.0), (0, 9.0)], SILVER)
    holes = [
        sphere(0.25, DARK, x=0.9 * math.cos(a), y=0.9 * math.sin(a), z=9.0, subdivisions=1)
        for a in np.linspace(0, 2 * math.pi, 6)[:-1]
    ]
    return combine(body, cap, *holes)


def pepper_mill():
    body = lathe([(0, 0), (3.0, 0), (3.2, 2), (2.4, 6), (2.6, 12), (3.2, 16), (3.0, 19), (0, 19)], WOOD)
    band = lathe([(3.05, 16.2), (3.15, 17.0), (3.17, 17.0), (3.07, 16.2)], DARK)
    knob = sphere(0.9, SILVER, z=19.6, subdivisions=2)
    return combine(body, band, knob)


def kettle():
    body = lathe([(0, 0), (8.5, 0), (9.5, 4), (9.0, 11), (6.0, 15), (0, 15)], STEEL, sections=48)
    lid_knob = sphere(1.4, DARK, z=15.6, subdivisions=2)
    spout = capsule_between([8.0, 0, 5], [14.5, 0, 13], 1.3, STEEL)
    handle = rotated(torus(6.5, 0.9, DARK), "x", 90)
    handle.apply_translation([-1, 0, 15])
    return combine(body, lid_knob, spout, upper_half(handle, 16.0))


def saucepan():
    pot = lathe([(0, 0), (8.0, 0), (8.2, 0.4), (8.2, 9), (7.8, 9), (7.8, 0.6), (0, 0.6)], STEEL, sections=48)
    handle = box(9, 2.2, 1.2, DARK, x=12.5, z=7.2)
    return combine(pot, handle)


def frying_pan():
    pan = lathe([(0, 0), (9.5, 0), (12.5, 4.5), (12.0, 4.5), (9.2, 0.6), (0, 0.6)], DARK, sections=48)
    inner = lathe([(0, 0.62), (9.1, 0.62), (9.1, 0.66), (0, 0.66)], (70, 70, 78), sections=48)
    handle = capsule_between([12.0, 0, 4.0], [20.0, 0, 5.5], 1.1, WOOD)
    return combine(pan, inner, handle)


def glass_jar():
    body = lathe([(0, 0), (4.5, 0), (4.8, 1), (4.8, 11), (3.9, 12.5), (0, 12.5)], GLASS)
    lid = cylinder(4.1, 1.6, GOLD, z=12.3)
    label = lathe([(4.85, 4), (4.85, 8), (4.87, 8), (4.87, 4)], WHITE)
    return combine(body, lid, label)


def honey_jar():
    body = lathe([(0, 0), (4.0, 0), (5.2, 3), (5.2, 8), (3.6, 10.5), (0, 10.5)], (225, 150, 30), sections=6)
    lid = cylinder(3.7, 1.4, (215, 195, 150), z=10.3)
    dipper = capsule_between([0, 0, 10.0], [1.5, 0.8, 17.0], 0.35, WOOD)
    return combine(body, lid, dipper)


def pitcher():
    body = lathe(
        [(0, 0), (5.0, 0), (6.5, 7), (5.4, 15), (6.2, 19), (5.8, 19), (5.0, 15), (6.0, 7), (4.6, 0.6), (0, 0.6)],
        (230, 230, 240),
        sections=48,
    )
    spout = box(3.0, 3.0, 1.0, (230, 230, 240), x=-6.4, z=18.2)
    return combine(body, spout, _handle(4.6, 0.8, (230, 230, 240), 5.6, 11.0))


def drinking_glass():
    return combine(
        lathe([(0, 0), (3.2, 0), (3.9, 12.5), (3.6, 12.5), (2.9, 0.9), (0, 0.9)], GLASS),
        lathe([(0, 0.95), (2.95, 0.95), (3.4, 8.0), (0, 8.0)], (240, 160, 40)),
    )


def cutting_board():
    board = box(32, 21, 1.8, WOOD)
    hole = cylinder(1.4, 1.9, DARK, x=13.0, z=0.0)
    groove = box(28, 0.6, 0.1, BROWN, y=9.0, z=1.8)
    return combine(board, hole, groove)


def toaster():
    body = box(26, 15, 18, (200, 40, 40))
    top = box(26.2, 15.2, 0.6, SILVER, z=18)
    slots = [box(20, 2.2, 0.3, DARK, y=s * 3.5, z=18.5) for s in (-1, 1)]
    lever = box(1.5, 2.2, 1.5, DARK, x=13.6, z=12)
    return combine(body, top, *slots, lever)


def blender():
    base = box(14, 14, 10, DARK)
    jar = lathe([(0, 10), (5.5, 10), (7.0, 28), (6.8, 28), (0, 28)], GLASS)
    lid = cylinder(7.0, 1.5, DARK, z=27.8)
    dial = rotated(cylinder(1.3, 0.8, SILVER, z=-0.4), "y", 90)
    dial.apply_translation([7.2, 0, 4.0])
    return combine(base, jar, lid, dial)


def sugar_bowl():
    bowl_ = lathe([(0, 0), (3.0, 0), (5.5, 3), (5.8, 7), (0, 7)], WHITE)
    lid = lathe([(0, 7), (5.9, 7), (5.0, 8.6), (0, 9.2)], WHITE)
    knob = sphere(1.0, GOLD, z=9.8, subdivisions=2)
    handles = [rotated(_handle(2.0, 0.45, WHITE, 5.6, 4.6), "z", angle) for angle in (0, 180)]
    return combine(bowl_, lid, knob, *handles)


def cookie_jar():
    jar = lathe([(0, 0), (7, 0), (8.5, 6), (8.0, 16), (6.5, 18), (0, 18)], TERRACOTTA, sections=48)
    lid = lathe([(0, 17.8), (6.8, 17.8), (5.5, 20), (0, 21)], CREAM, sections=48)
    knob = sphere(1.6, CREAM, z=21.5, subdivisions=2)
    cookie = rotated(moved(cylinder(2.6, 0.8, (190, 130, 70)), 0, 0, -0.4), "x", 90)
    cookie.apply_translation([0, -8.4, 9])
    return combine(jar, lid, knob, cookie)


def thermos():
    body = lathe([(0, 0), (4.0, 0), (4.2, 1), (4.2, 22), (3.4, 24), (0, 24)], (40, 110, 90))
    cup = lathe([(0, 23.8), (3.8, 23.8), (4.0, 29), (0, 29)], DARK)
    band = lathe([(4.25, 2), (4.25, 3.5), (4.27, 3.5), (4.27, 2)], SILVER)
    return combine(body, cup, band)


def water_bottle():
    body = lathe([(0, 0), (3.6, 0), (3.8, 1), (3.8, 18), (2.6, 21), (0, 21)], (60, 160, 220))
    cap = cylinder(2.2, 2.5, WHITE, z=20.8)
    loop = rotated(torus(1.1, 0.3, WHITE), "x", 90)
    loop.apply_translation([0, 0, 24.0])
    return combine(body, cap, loop)


def milk_carton():
    tm = trimesh_module()
    body = box(7, 7, 16, WHITE)
    verts = np.array(
        [[-3.5, -3.5, 16], [3.5, -3.5, 16], [3.5, 3.5, 16], [-3.5, 3.5, 16], [-3.5, 0, 19.5], [3.5, 0, 19.5]], float
    )
    faces = np.array([[0, 1, 5], [0, 5, 4], [2, 3, 4], [2, 4, 5], [0, 4, 3], [1, 2, 5]])
    roof = part(tm.Trimesh(verts, faces), WHITE)
    fin = box(7, 0.5, 1.5, WHITE, z=19.3)
    band = box(7.04, 7.04, 5, BLUE, z=5)
    return combine(body, roof, fin, band)


def cereal_box():
    body = box(19, 7, 28, (235, 170, 40))
    panel = box(15, 0.1, 14, (200, 60, 40), y=-3.55, z=8)
    bowl_ = sphere(3.2, WHITE, y=-3.6, z=6.5, scale=(1.3, 0.1, 0.6), subdivisions=2)
    return combine(body, panel, bowl_)


# --- food ------------------------------------------------------------------------------------------------------


def lemon():
    body = sphere(3.5, LEMON, z=3.0, scale=(1.35, 1.0, 0.85), subdivisions=3)
    tips = [sphere(0.6, LEMON, x=s * 4.5, z=3.0, scale=(1.0, 0.8, 0.8), subdivisions=2) for s in (-1, 1)]
    return combine(body, *tips)


def lime():
    body = sphere(3.0, LIME, z=2.6, scale=(1.2, 1.0, 0.86), subdivisions=3)
    tip = sphere(0.5, LIME, x=3.6, z=2.6, subdivisions=1)
    return combine(body, tip)


def strawberry():
    berry = lathe([(0, 0), (1.2, 0.6), (2.4, 2.5), (2.9, 4.5), (2.2, 5.6), (0, 5.8)], (215, 35, 45))
    seeds = [
        sphere(0.18, YELLOW, x=2.3 * math.cos(a), y=2.3 * math.sin(a), z=z, subdivisions=1)
        for z in (2.5, 4.0)
        for a in np.linspace(0, 2 * math.pi, 9)[:-1] + z
    ]
    leaves = [
        sphere(0.7, DARK_GREEN, x=1.0 * math.cos(a), y=1.0 * math.sin(a), z=5.75, scale=(1.5, 0.5, 0.2), subdivisions=2)
        for a in np.linspace(0, 2 * math.pi, 6)[:-1]
    ]
    leaves.append(cylinder(0.25, 1.2, DARK_GREEN, z=5.7))
    return combine(berry, *seeds, *leaves)


def pineapple():
    body = sphere(5.5, (200, 150, 40), z=8, scale=(1, 1, 1.45), subdivisions=3)
    crown = []
    for k in range(9):
        a = 2 * math.pi * k / 9
        crown.append(capsule_between([0, 0, 15], [3.5 * math.cos(a), 3.5 * math.sin(a), 22 + (k % 3)], 0.6, DARK_GREEN))
    crown.append(capsule_between([0, 0, 15], [0, 0, 24], 0.7, DARK_GREEN))
    return combine(body, *crown)


def avocado():
    body = lathe([(0, 0), (3.2, 0.4), (4.2, 2.5), (3.8, 5.5), (2.6, 8.0), (1.2, 9.6), (0, 9.8)], (50, 80, 35))
    return combine(rotated(body, "y", 90))


def tomato():
    t = np.linspace(0, math.pi, 21)
    body = lathe(list(zip(4.2 * np.sin(t), 3.2 * (1 - np.cos(t)))), (220, 45, 35))
    calyx = [
        capsule_between([0, 0, 6.4], [2.2 * math.cos(a), 2.2 * math.sin(a), 6.1], 0.3, GREEN)
        for a in np.linspace(0, 2 * math.pi, 6)[:-1]
    ]
    stem = cylinder(0.3, 1.0, GREEN, z=6.3)
    return combine(body, *calyx, stem)


def onion():
    body = lathe(
        [(0, 0), (2.0, 0.3), (4.0, 2.2), (4.5, 4.0), (3.4, 6.5), (1.0, 8.5), (0.3, 10.5), (0, 10.6)], (170, 95, 60)
    )
    roots = [
        capsule_between([0, 0, 0.3], [0.8 * math.cos(a), 0.8 * math.sin(a), 0.0], 0.15, CREAM)
        for a in np.linspace(0, 2 * math.pi, 7)[:-1]
    ]
    return combine(body, *roots)


def bell_pepper():
    body = ridged_sphere(5, (40, 150, 40), ridges=4, depth=0.08, z_scale=1.15, z=5.5)
    stem = capsule_between([0, 0, 10.8], [0.5, 0, 13], 0.55, DARK_GREEN)
    return combine(body, stem)


def bread_loaf():
    crust = sphere(7, (185, 120, 55), z=4.2, scale=(1.7, 1.0, 0.75), subdivisions=3)
    base = box(21, 12, 3, (185, 120, 55), z=0)
    cuts = [box(0.6, 9, 0.4, (230, 190, 130), x=x, z=9.2) for x in (-6, -2, 2, 6)]
    return combine(base, crust, *cuts)


def croissant():
    pieces = []
    n = 7
    for i in range(n):
        a0, a1 = -1.2 + 2.4 * i / n, -1.2 + 2.4 * (i + 1) / n
        p0 = [7 * math.sin(a0), 7 * math.cos(a0) - 5, 3.0]
        p1 = [7 * math.sin(a1), 7 * math.cos(a1) - 5, 3.0]
        r = 3.0 * (1 - 0.7 * abs((i + 0.5) / n - 0.5) * 2) + 0.5
        pieces.append(capsule_between(p0, p1, r, (215, 150, 60) if i % 2 else (195, 125, 45)))
    return combine(*pieces)


def cheese_wedge():
    tm = trimesh_module()
    verts = np.array([[0, -5, 0], [14, 0, 0], [0, 5, 0], [0, -5, 7], [14, 0, 7], [0, 5, 7]], float)
    faces = np.array([[0, 2, 1], [3, 4, 5], [0, 1, 4], [0, 4, 3], [1, 2, 5], [1, 5, 4], [2, 0, 3], [2, 3, 5]])
    wedge = part(tm.Trimesh(verts, faces), (250, 205, 80))
    holes = [
        sphere(0.9, (220, 170, 50), x=x, y=y, z=z, subdivisions=1)
        for x, y, z in ((4, 2.9, 3), (7, -1.9, 5), (3, -3.4, 2))
    ]
    return combine(wedge, *holes)


def cupcake():
    liner = lathe([(0, 0), (2.8, 0), (3.8, 4.5), (0, 4.5)], (80, 160, 220), sections=16)
    frosting = [torus(2.6 - 0.6 * k, 1.1 - 0.15 * k, PINK, z=5.0 + 1.3 * k) for k in range(3)]
    top = sphere(1.0, PINK, z=8.4, subdivisions=2)
    cherry = sphere(0.8, RED, z=9.5, subdivisions=2)
    return combine(liner, *frosting, top, cherry)


def mortar_and_pestle():
    mortar = lathe([(0, 0), (4.5, 0), (6.5, 2), (7.0, 7), (6.2, 7), (5.4, 3), (0, 2.4)], (120, 120, 118), sections=48)
    pestle = capsule_between([1.0, 0, 3.5], [6.0, 0, 14.0], 1.1, WOOD)
    knob = sphere(1.6, WOOD, x=6.3, z=14.6, subdivisions=2)
    return combine(mortar, pestle, knob)


# --- home and office --------------------------------------------------------------------------------------------


def tissue_box():
    body = box(22, 12, 9, (110, 170, 200))
    slot = box(12, 3, 0.2, WHITE, z=9)
    tissue = sphere(2.5, WHITE, z=10, scale=(1.3, 0.8, 1.2), subdivisions=2)
    return combine(body, slot, tissue)


def piggy_bank():
    pig = (240, 150, 170)
    body = sphere(6.5, pig, z=8.0, scale=(1.25, 1.0, 0.95), subdivisions=3)
    snout = cylinder(2.0, 1.6, (225, 120, 145), sections=24)
    snout = rotated(snout, "y", 90)
    snout.apply_translation([7.8, 0, 8.2])
    legs = [cylinder(1.4, 3.0, pig, x=sx * 4.2, y=sy * 3.2) for sx in (-1, 1) for sy in (-1, 1)]
    ears = [cone(1.6, 2.4, pig, x=4.0, y=s * 2.6, z=12.5, sections=16) for s in (-1, 1)]
    slot = box(3.0, 0.5, 0.3, DARK, z=14.1)
    eyes = [sphere(0.45, DARK, x=6.6, y=s * 1.8, z=10.0, subdivisions=1) for s in (-1, 1)]
    return combine(body, snout, *legs, *ears, slot, *eyes)


def headphones():
    band = rotated(torus(8.0, 0.8, DARK), "x", 90)
    band.apply_translation([0, 0, 8.5])
    band = upper_half(band, 8.5)
    cups = []
    for s in (-1, 1):
        cup_ = rotated(cylinder(3.6, 3.0, DARK, z=-1.5), "y", 90)
        cup_.apply_translation([s * 8.0, 0, 5.0])
        pad = rotated(cylinder(3.2, 0.8, GREY, z=-0.4), "y", 90)
        pad.apply_translation([s * 6.2, 0, 5.0])
        cups += [cup_, pad]
    return combine(band, *cups)


def computer_mouse():
    body = sphere(4.0, (60, 60, 70), z=0.0, scale=(1.5, 0.85, 0.75), subdivisions=3)
    body = upper_half(body, 0.0)
    wheel = rotated(cylinder(0.7, 0.5, GREY, z=-0.25), "x", 90)
    wheel.apply_translation([2.6, 0, 2.7])
    split = box(4, 0.15, 0.2, DARK, x=3.6, z=2.55)
    return combine(body, wheel, split)


def tv_remote():
    body = box(5, 18, 2.0, DARK)
    buttons = [cylinder(0.45, 0.3, GREY, x=x, y=y, z=2.0, sections=12) for x in (-1.3, 0, 1.3) for y in (-4, -2, 0, 2)]
    power = cylinder(0.6, 0.3, RED, y=6.5, z=2.0, sections=12)
    return combine(body, *buttons, power)


def stapler():
    base = box(16, 4.2, 1.2, DARK)
    arm = box(15, 3.6, 2.4, RED, x=0.4, z=1.8)
    hinge = rotated(cylinder(1.2, 4.2, DARK, z=-2.1), "x", 90)
    hinge.apply_translation([-7, 0, 2.2])
    return combine(base, arm, hinge)


def tape_dispenser():
    body = box(14, 5, 5, DARK)
    front = box(4, 5, 7, DARK, x=5, z=0)
    roll = rotated(torus(2.8, 1.0, (230, 230, 220)), "x", 90)
    roll.apply_translation([-1, 0, 7.0])
    return combine(body, front, roll)


def pencil_cup():
    cup_ = lathe([(0, 0), (4.0, 0), (4.0, 10), (3.6, 10), (3.6, 0.6), (0, 0.6)], (60, 60, 70))
    pencils = []
    for k, color in enumerate([YELLOW, RED, BLUE, GREEN, ORANGE]):
        a = 2 * math.pi * k / 5
        top = [2.4 * math.cos(a) * 1.6, 2.4 * math.sin(a) * 1.6, 17 - (k % 2)]
        pencils.append(capsule_between([1.6 * math.cos(a), 1.6 * math.sin(a), 1.0], top, 0.45, color))
    return combine(cup_, *pencils)


def desk_globe():
    stand = lathe([(0, 0), (5.5, 0), (5.5, 1.2), (1.0, 2.0), (0.8, 6.0), (0, 6.0)], WOOD)
    ball = sphere(8.0, (60, 120, 200), z=15.0, subdivisions=3)
    land = [
        sphere(3.0, (80, 160, 70), x=x, y=y, z=z, scale=(1.0, 1.0, 0.6), subdivisions=2)
        for x, y, z in ((6.2, 1.5, 17.5), (-3.0, 6.0, 14.0), (1.0, -6.5, 12.0), (-5.5, -3.5, 19.0))
    ]
    meridian = rotated(torus(8.8, 0.35, GOLD), "x", 90)
    meridian.apply_translation([0, 0, 15.0])
    return combine(stand, ball, *land, meridian)


def spray_bottle():
    body = lathe([(0, 0), (3.5, 0), (3.6, 12), (1.5, 15), (0, 15)], (120, 200, 230))
    head = box(2.6, 3.0, 4.0, WHITE, z=14.8)
    nozzle = box(3.0, 1.2, 1.2, WHITE, x=2.6, z=17.0)
    trigger = box(1.0, 1.6, 3.0, WHITE, x=1.8, z=13.6)
    return combine(body, head, nozzle, trigger)


def soap_dispenser():
    body = lathe([(0, 0), (3.8, 0), (4.0, 9), (1.4, 11.5), (0, 11.5)], (200, 230, 210))
    pump = cylinder(0.6, 3.0, SILVER, z=11.3)
    head = box(1.4, 4.5, 1.2, SILVER, y=1.4, z=14.2)
    return combine(body, pump, head)


def perfume_bottle():
    body = box(7, 3.6, 8, (230, 180, 200))
    neck = cylinder(0.8, 1.2, GOLD, z=8)
    cap = sphere(1.8, GOLD, z=10.6, subdivisions=2)
    return combine(body, neck, cap)


def hourglass():
    glass = lathe([(0, 1.2), (3.5, 1.2), (3.2, 4), (0.6, 7.5), (3.2, 11), (3.5, 13.8), (0, 13.8)], GLASS)
    sand = lathe([(0, 1.25), (3.0, 1.25), (1.0, 4.5), (0, 4.5)], (230, 200, 130))
    plates = [cylinder(4.5, 1.2, WOOD), cylinder(4.5, 1.2, WOOD, z=13.8)]
    posts = [
        cylinder(0.4, 12.6, WOOD, x=3.9 * math.cos(a), y=3.9 * math.sin(a), z=1.2)
        for a in (0.3, 0.3 + 2 * math.pi / 3, 0.3 + 4 * math.pi / 3)
    ]
    return combine(glass, sand, *plates, *posts)


def lantern():
    base = cylinder(5, 1.5, DARK)
    glass = cylinder(4.0, 11, (250, 230, 170), z=1.5)
    posts = [
        cylinder(0.4, 11, DARK, x=4.2 * math.cos(a), y=4.2 * math.sin(a), z=1.5)
        for a in np.linspace(0, 2 * math.pi, 5)[:-1]
    ]
    roof = cone(5.5, 4, DARK, z=12.5)
    ring = rotated(torus(1.8, 0.35, DARK), "x", 90)
    ring.apply_translation([0, 0, 17.8])
    return combine(base, glass, *posts, roof, ring)


def trophy():
    base = box(9, 9, 3, DARK)
    stem = lathe([(0, 3), (2.0, 3), (0.8, 6), (0.8, 9), (0, 9)], GOLD)
    cup_ = lathe([(0, 9), (1.2, 9), (4.5, 12), (5.5, 18), (5.2, 18), (0, 13)], GOLD, sections=40)
    handles = [_handle(2.2, 0.4, GOLD, 5.2, 15.0), rotated(_handle(2.2, 0.4, GOLD, 5.2, 15.0), "z", 180)]
    return combine(base, stem, cup_, *handles)


def desk_bell():
    base = cylinder(4.5, 1.0, DARK)
    dome = lathe([(0, 1.0), (4.2, 1.0), (4.0, 2.5), (3.0, 4.8), (0, 5.6)], GOLD, sections=40)
    button = cylinder(0.5, 1.2, GOLD, z=5.5)
    return combine(base, dome, button, sphere(0.7, GOLD, z=6.8, subdivisions=2))


def paint_can():
    can = lathe([(0, 0), (7.5, 0), (7.5, 14), (0, 14)], SILVER, sections=40)
    label = lathe([(7.55, 2.5), (7.55, 11), (7.57, 11), (7.57, 2.5)], (40, 140, 200), sections=40)
    drip = sphere(1.0, (40, 140, 200), x=6.0, z=14.0, scale=(1, 1, 0.4), subdivisions=2)
    handle = rotated(torus(7.6, 0.25, GREY), "x", 90)
    handle.apply_translation([0, 0, 12])
    return combine(can, label, drip, upper_half(handle, 12.5))


def lunch_box():
    body = box(20, 10, 13, (60, 150, 120))
    lid_line = box(20.1, 10.1, 0.4, DARK, z=9)
    handle = rotated(torus(4.0, 0.6, DARK), "x", 90)
    handle.apply_translation([0, 0, 13])
    latches = [box(1.5, 0.4, 2.0, SILVER, x=s * 6, y=-5.1, z=8) for s in (-1, 1)]
    return combine(body, lid_line, upper_half(handle, 13.2), *latches)


def storage_basket():
    basket = lathe([(0, 0), (10, 0), (12, 14), (11.4, 14), (9.5, 0.8), (0, 0.8)], (200, 160, 100), sections=48)
    bands = [
        lathe(
            [
                (10.1 + 2 * z / 14, z),
                (10.1 + 2 * (z + 1) / 14, z + 1),
                (10.12 + 2 * (z + 1) / 14, z + 1),
                (10.12 + 2 * z / 14, z),
            ],
            (150, 105, 55),
            sections=48,
        )
        for z in (3, 7, 11)
    ]
    return combine(basket, *bands)


def backpack():
    body = box(26, 14, 34, (40, 90, 160))
    top = sphere(13, (40, 90, 160), z=34, scale=(1.0, 0.54, 0.3), subdivisions=2)
    pocket = box(18, 4, 14, (30, 70, 130), y=-8.5, z=4)
    strap = rotated(torus(4, 0.8, DARK), "x", 90)
    strap.apply_translation([0, 0, 37])
    return combine(body, top, pocket, upper_half(strap, 37.5))


def baseball_cap():
    crown = sphere(9.5, (200, 50, 50), z=0.0, scale=(1.0, 1.0, 0.8), subdivisions=3)
    crown = upper_half(crown, 0.0)
    brim = sphere(6.5, (200, 50, 50), x=10.0, z=0.4, scale=(1.2, 1.15, 0.08), subdivisions=2)
    button = sphere(0.9, (200, 50, 50), z=7.6, subdivisions=1)
    return combine(crown, brim, button)


def succulent():
    pot = lathe([(0, 0), (5.5, 0), (6.5, 7), (0, 7)], (240, 240, 235))
    leaves = []
    for ring_, (count, length, tilt) in enumerate(((8, 5.0, 0.55), (6, 3.8, 0.9), (4, 2.4, 1.2))):
        for k in range(count):
            a = 2 * math.pi * (k + 0.5 * ring_) / count
            end = [
                length * math.cos(a) * math.cos(tilt * 0.6),
                length * math.sin(a) * math.cos(tilt * 0.6),
                7.5 + length * math.sin(tilt) * 0.7,
            ]
            leaves.append(capsule_between([0, 0, 7.3], end, 1.1 - 0.2 * ring_, (110, 170, 120)))
    return combine(pot, *leaves)


# --- toys and figurines -----------------------------------------------------------------------------------------


def puzzle_cube():
    colours = [(200, 30, 30), (30, 120, 220), (250, 210, 40), (40, 160, 70), (245, 130, 30), WHITE]
    cubies = [
        box(2.4, 2.4, 2.4, DARK, x=x, y=y, z=z) for x in (-2.5, 0, 2.5) for y in (-2.5, 0, 2.5) for z in (0, 2.5, 5.0)
    ]
    stickers = []
    for i, x in enumerate((-2.5, 0, 2.5)):
        for j, z in enumerate((0, 2.5, 5.0)):
            stickers.append(box(2.0, 0.1, 2.0, colours[(i + 2 * j) % 6], x=x, y=-3.75, z=z + 0.2))
            stickers.append(box(0.1, 2.0, 2.0, colours[(i + j + 1) % 6], x=3.75, y=x, z=z + 0.2))
        for j, y in enumerate((-2.5, 0, 2.5)):
            stickers.append(box(2.0, 2.0, 0.1, colours[(i * 2 + j + 3) % 6], x=x, y=y, z=7.4))
    return combine(*cubies, *stickers)


def toy_blocks():
    blocks = [box(6, 6, 6, RED, x=-3.2), box(6, 6, 6, BLUE, x=3.2), box(6, 6, 6, YELLOW, z=6)]
    letters = [
        box(3, 0.2, 3, WHITE, x=-3.2, y=-3.05, z=1.5),
        box(3, 0.2, 3, WHITE, x=3.2, y=-3.05, z=1.5),
        box(3, 0.2, 3, WHITE, y=-3.05, z=7.5),
    ]
    return combine(*blocks, *letters)


def toy_drum():
    shell = cylinder(7, 8, RED, z=0.5, sections=40)
    rims = [cylinder(7.3, 0.8, GOLD, sections=40), cylinder(7.3, 0.8, GOLD, z=8.2, sections=40)]
    head = cylinder(6.9, 0.1, CREAM, z=8.9, sections=40)
    sticks = [capsule_between([-3, s * 2, 9.3], [5, s * 3.5, 10.5], 0.35, WOOD) for s in (-1, 1)]
    return combine(shell, *rims, head, *sticks)


def _prism(points_xz, thickness: float, color):
    """A flat polygon in the xz plane (convex, counter-clockwise) extruded ``thickness`` along y."""
    tm = trimesh_module()
    n = len(points_xz)
    verts = [[x, -thickness / 2, z] for x, z in points_xz] + [[x, thickness / 2, z] for x, z in points_xz]
    faces = [[0, i, i + 1] for i in range(1, n - 1)] + [[n, n + i + 1, n + i] for i in range(1, n - 1)]
    faces += [f for i in range(n) for f in ([i, (i + 1) % n, n + (i + 1) % n], [i, n + (i + 1) % n, n + i])]
    mesh = tm.Trimesh(np.array(verts, float), np.array(faces), process=True)
    mesh.fix_normals()
    return part(mesh, color)


def toy_sailboat():
    hull = sphere(8, (180, 60, 40), z=6.0, scale=(1.5, 0.7, 0.75), subdivisions=3)
    hull = faces_where(hull, hull.triangles_center[:, 2] <= 6.0)  # the lower half of the ellipsoid: the hull
    deck = box(23, 10, 0.8, WOOD, z=5.6)
    mast = cylinder(0.5, 22, WOOD, z=6.0)
    sail = _prism([(1.0, 8), (11.5, 8), (1.0, 27)], 0.8, WHITE)
    jib = _prism([(-9.5, 8), (-1.0, 8), (-1.0, 24)], 0.8, (240, 200, 60))
    flag = _prism([(0.5, 27.5), (3.5, 28.5), (0.5, 29.5)], 0.3, RED)
    return combine(hull, deck, mast, sail, jib, flag)


def toy_train():
    body = box(14, 7, 6, (30, 110, 60), z=2.5)
    cab = box(5, 7, 6, (30, 110, 60), x=-4.5, z=8.5)
    roof = box(6, 8, 0.8, RED, x=-4.5, z=14.5)
    boiler = rotated(cylinder(2.8, 8, (30, 110, 60)), "y", 90)
    boiler.apply_translation([1.0, 0, 8.5])
    chimney = cylinder(1.0, 3.5, DARK, x=4.0, z=10.5)
    wheels = []
    for wx in (-4.5, 0, 4.5):
        for wy in (-3.6, 3.6):
            wheel = rotated(cylinder(1.8, 0.8, RED, z=-0.4), "x", 90)
            wheel.apply_translation([wx, wy, 1.8])
            wheels.append(wheel)
    return combine(body, cab, roof, boiler, chimney, *wheels)


def toy_airplane():
    fuselage = rotated(capsule_between([0, 0, 0], [0, 0, 20], 2.0, WHITE), "y", 90)
    fuselage.apply_translation([-10, 0, 3.5])
    wings = box(6, 24, 0.8, (220, 60, 50), x=1, z=3.2)
    tail = box(3, 9, 0.6, (220, 60, 50), x=-9, z=4.0)
    fin = box(3, 0.6, 5, (220, 60, 50), x=-9.5, z=4.0)
    windows = [sphere(0.5, LIGHT_BLUE, x=x, y=-1.9, z=4.4, subdivisions=1) for x in (-5, -3, -1, 3)]
    propeller = box(0.4, 6, 0.8, DARK, x=10.3, z=3.1)
    return combine(fuselage, wings, tail, fin, *windows, propeller)


def spinning_top():
    body = lathe([(0, 0), (0.4, 0.2), (5.5, 5), (5.8, 6), (3.0, 8), (0, 8.2)], (230, 60, 120))
    stripe = lathe([(5.52, 5.2), (5.82, 5.9), (5.84, 5.9), (5.54, 5.2)], YELLOW)
    handle = cylinder(0.6, 4, WOOD, z=8)
    return combine(body, stripe, handle)


def yo_yo():
    halves = [
        rotated(lathe([(0, 0), (4.0, 0), (4.2, 1.3), (0.8, 1.8), (0, 1.8)], (40, 160, 200)), "x", 90 + 180 * s)
        for s in (0, 1)
    ]
    halves[0].apply_translation([0, -0.3, 4.2])
    halves[1].apply_translation([0, 0.3, 4.2])
    axle = rotated(cylinder(0.6, 0.8, WHITE, z=-0.4), "x", 90)
    axle.apply_translation([0, 0, 4.2])
    string = capsule_between([0, 0, 4.2], [0, 0, 12], 0.12, WHITE)
    return combine(*halves, axle, string)


def mallard_decoy():
    body = sphere(6, (120, 95, 70), z=4.6, scale=(1.6, 1.0, 0.75), subdivisions=3)
    head = sphere(2.8, (20, 110, 60), x=7.0, z=10.0, subdivisions=3)
    neck_ring = torus(1.9, 0.45, WHITE, x=6.3, z=7.8)
    bill = sphere(1.3, YELLOW, x=9.8, z=9.5, scale=(1.7, 0.8, 0.45), subdivisions=2)
    tail = sphere(2.0, DARK, x=-9.0, z=6.5, scale=(1.3, 0.7, 0.5), subdivisions=2)
    wing = sphere(4.2, (70, 70, 80), x=-1.5, z=6.8, scale=(1.5, 1.2, 0.45), subdivisions=2)
    eyes = [sphere(0.4, DARK, x=8.6, y=s * 1.8, z=10.6, subdivisions=1) for s in (-1, 1)]
    return combine(body, head, neck_ring, bill, tail, wing, *eyes)


def penguin_figurine():
    body = sphere(5, DARK, z=8, scale=(0.9, 0.85, 1.55), subdivisions=3)
    belly = sphere(4, WHITE, x=1.6, z=7.5, scale=(0.6, 0.8, 1.4), subdivisions=3)
    beak = cone(0.8, 2.0, ORANGE, sections=12)
    beak = rotated(beak, "y", 90)
    beak.apply_translation([4.2, 0, 12.8])
    feet = [sphere(1.2, ORANGE, x=2.2, y=s * 1.6, z=0.4, scale=(1.4, 0.9, 0.35), subdivisions=1) for s in (-1, 1)]
    eyes = [sphere(0.45, WHITE, x=3.8, y=s * 1.3, z=13.6, subdivisions=1) for s in (-1, 1)]
    flippers = [capsule_between([0, s * 4.0, 11], [0.5, s * 4.8, 5], 0.7, DARK) for s in (-1, 1)]
    return combine(body, belly, beak, *feet, *eyes, *flippers)


def owl_figurine():
    body = sphere(5, (150, 110, 70), z=6.5, scale=(0.9, 1.0, 1.3), subdivisions=3)
    face = [sphere(1.8, CREAM, x=4.0, y=s * 1.8, z=10.0, scale=(0.4, 1, 1), subdivisions=2) for s in (-1, 1)]
    eyes = [sphere(0.8, DARK, x=4.6, y=s * 1.8, z=10.0, subdivisions=1) for s in (-1, 1)]
    beak = cone(0.5, 1.2, ORANGE, x=0, sections=10)
    beak = rotated(beak, "y", 90)
    beak.apply_translation([4.6, 0, 8.6])
    ears = [cone(1.0, 2.4, (150, 110, 70), x=0.5, y=s * 2.6, z=12.2, sections=12) for s in (-1, 1)]
    base = cylinder(4.5, 1.0, WOOD)
    body.apply_translation([0, 0, 0.6])
    return combine(base, body, *face, *eyes, beak, *ears)


def birdhouse():
    tm = trimesh_module()
    walls = box(12, 12, 13, (200, 170, 120), z=2)
    verts = np.array([[-7, -7.5, 15], [7, -7.5, 15], [7, 7.5, 15], [-7, 7.5, 15], [0, -7.5, 21], [0, 7.5, 21]], float)
    faces = np.array([[0, 1, 4], [2, 3, 5], [1, 2, 5], [1, 5, 4], [3, 0, 4], [3, 4, 5], [0, 3, 2], [0, 2, 1]])
    roof = part(tm.Trimesh(verts, faces), DARK_RED)
    hole = rotated(cylinder(2.0, 0.3, DARK), "y", 90)
    hole.apply_translation([6.0, 0, 10])
    perch = capsule_between([6.0, 0, 7], [8.5, 0, 7], 0.3, WOOD)
    post = box(4, 4, 2, WOOD)
    return combine(post, walls, roof, hole, perch)


def rubber_boot():
    shaft = box(9, 8, 22, (240, 200, 30), z=4)
    foot = box(20, 9, 5, (240, 200, 30), x=5.5)
    toe = sphere(4.5, (240, 200, 30), x=15, z=2.5, scale=(1.0, 1.0, 0.55), subdivisions=2)
    sole = box(24, 9.4, 1.0, DARK, x=5)
    rim = box(9.4, 8.4, 1.2, DARK, z=25)
    return combine(shaft, foot, toe, sole, rim)


def sneaker():
    blue, navy = (50, 90, 200), (25, 45, 110)
    sole = box(27, 10, 2.4, WHITE)
    toe_cap = sphere(5, WHITE, x=11.5, z=1.2, scale=(1.0, 1.0, 0.3), subdivisions=2)
    upper = sphere(7, blue, x=0.5, z=2.2, scale=(1.85, 0.68, 1.05), subdivisions=3)
    upper = upper_half(upper, 2.2)
    heel = box(7, 9.2, 8.5, blue, x=-9.5, z=2.2)
    opening = sphere(3.0, DARK, x=-6.5, z=9.6, scale=(1.3, 0.85, 0.25), subdivisions=2)
    laces = [box(0.7, 5.4, 0.5, WHITE, x=x, z=8.3 - 0.55 * (x + 2)) for x in (-2, 0, 2, 4)]
    stripe = sphere(3.0, navy, x=-1, y=-4.5, z=5, scale=(1.6, 0.1, 0.5), subdivisions=2)
    return combine(sole, toe_cap, upper, heel, opening, *laces, stripe)


#: Model name -> builder, merged into :data:`commonlink.synth.models.PROCEDURAL_MODELS`.
HOUSEHOLD_MODELS: dict[str, Callable] = {
    fn.__name__: fn
    for fn in (
        measuring_cup,
        silver_whisk,
        gold_jigger,
        silver_jigger,
        salt_shaker,
        pepper_mill,
        kettle,
        saucepan,
        frying_pan,
        glass_jar,
        honey_jar,
        pitcher,
        drinking_glass,
        cutting_board,
        toaster,
        blender,
        sugar_bowl,
        cookie_jar,
        thermos,
        water_bottle,
        milk_carton,
        cereal_box,
        lemon,
        lime,
        strawberry,
        pineapple,
        avocado,
        tomato,
        onion,
        bell_pepper,
        bread_loaf,
        croissant,
        cheese_wedge,
        cupcake,
        mortar_and_pestle,
        tissue_box,
        piggy_bank,
        headphones,
        computer_mouse,
        tv_remote,
        stapler,
        tape_dispenser,
        pencil_cup,
        desk_globe,
        spray_bottle,
        soap_dispenser,
        perfume_bottle,
        hourglass,
        lantern,
        trophy,
        desk_bell,
        paint_can,
        lunch_box,
        storage_basket,
        backpack,
        baseball_cap,
        succulent,
        puzzle_cube,
        toy_blocks,
        toy_drum,
        toy_sailboat,
        toy_train,
        toy_airplane,
        spinning_top,
        yo_yo,
        mallard_decoy,
        penguin_figurine,
        owl_figurine,
        birdhouse,
        rubber_boot,
        sneaker,
    )
}
