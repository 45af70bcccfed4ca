"""Arithmetic and unit-conversion tasks of the demo (host side).

Numbers go up to three digits. Every reasoning trace first restates the problem in digits (so a
number written in words is read once), then works column by column: sums and differences with
carries and borrows, products by a one-digit factor, long division by a one-digit divisor. A
conversion multiplies by the unit table's factor, or divides when it goes to the larger unit.
"""

from __future__ import annotations

import random

from helios.demo.kinds import Expectation, Split, Task, TaskKind
from helios.demo.phrasing import Phrasings, compose, dress, write_number
from helios.demo.vocabulary import UNIT_CONVERSIONS

COLUMNS = ("Ones", "Tens", "Hundreds", "Thousands")

_ASK = ("What is", "What's", "whats", "How much is", "Calculate", "Compute", "Work out", "Find", "Solve",
        "Evaluate", "Give me", "Can you calculate", "Can you do", "Please compute", "Do", "I need", "Quick math:",
        "Help me with", "Answer", "Figure out", "What do you get for", "What would be", "Result of", "calc",
        "Can you solve", "Please work out", "What is the answer to", "What's the result of", "math:", "Quick:")
_END = ("?", "", ".", " =", " = ?", "=?", " equals?", " please", "??", " ?")
_EXPRESSIONS = {
    "add": ("{a} + {b}", "{a}+{b}", "{a} plus {b}", "{a} + {b} together", "the sum of {a} and {b}", "{a} add {b}",
            "{a} and {b} summed"),
    "subtract": ("{a} - {b}", "{a}-{b}", "{a} minus {b}", "{a} − {b}", "{a} less {b}", "{a} subtract {b}",
                 "{a} -{b}"),
    "multiply": ("{a} * {b}", "{a}*{b}", "{a} x {b}", "{a} × {b}", "{a} times {b}", "{a} multiplied by {b}",
                 "the product of {a} and {b}", "{a}x{b}", "{a} X {b}"),
    "divide": ("{a} / {b}", "{a}/{b}", "{a} ÷ {b}", "{a} divided by {b}", "{a} over {b}", "the quotient of {a} and {b}",
               "{a} divided into {b} parts", "{a} / by {b}"),
}
# Each operation's words in a larger lexicon, each with the operand order it implies ("remove {b}
# from {a}" is a - b, "{b} lots of {a}" is a × b, "{a} shared among {b}" is a ÷ b): the operation
# is read from the words, whichever synonym or order the request uses.
_MORE_EXPRESSIONS = {
    "add": ("the total of {a} and {b}", "{a} and {b} in total", "{a} together with {b}", "{a} combined with {b}",
            "{a} and {b} combined", "{a} increased by {b}", "{b} more than {a}", "{a} added to {b}",
            "{a} and {b} altogether", "{a} plus another {b}", "the sum total of {a} and {b}", "{a} with {b} more",
            "{a} and {b} put together", "the combined total of {a} and {b}"),
    "subtract": ("{a} take away {b}", "{b} less than {a}", "{a} decreased by {b}", "{a} reduced by {b}",
                 "{a} lowered by {b}", "{a} with {b} removed", "{a} after removing {b}", "{a} after taking off {b}",
                 "what remains of {a} after {b}", "{a} cut by {b}", "the gap from {b} up to {a}"),
    "multiply": ("{b} lots of {a}", "{b} groups of {a}", "{a} repeated {b} times", "{b} batches of {a}",
                 "{a} taken {b} times", "{a} scaled by {b}", "{b} sets of {a}", "{a}, {b} times over",
                 "{a} multiplied with {b}", "{b} rows of {a}"),
    "divide": ("{a} split {b} ways", "{a} shared among {b}", "{a} shared between {b}", "{a} split evenly among {b}",
               "{a} cut into {b} pieces", "{a} divided evenly by {b}", "{a} split into groups of {b}",
               "each share of {a} split among {b}", "{a} per {b}", "{a} in {b} shares", "{a} by {b} evenly"),
}
_COMMANDS = {
    "add": ("add {a} and {b}", "add {a} to {b}", "sum {a} and {b}", "total {a} and {b}", "combine {a} and {b}",
            "put {a} and {b} together", "increase {a} by {b}", "tally up {a} and {b}", "count {a} and {b} together",
            "add up {a} and {b}", "raise {a} by {b}", "find the sum of {a} and {b}"),
    "subtract": ("subtract {b} from {a}", "take {b} from {a}", "remove {b} from {a}", "deduct {b} from {a}",
                 "reduce {a} by {b}", "decrease {a} by {b}", "knock {b} off {a}", "take away {b} from {a}",
                 "lower {a} by {b}", "drop {b} from {a}", "cut {b} from {a}", "take {b} off {a}"),
    "multiply": ("multiply {a} by {b}", "multiply {a} and {b}", "times {a} by {b}", "scale {a} by {b}",
                 "take {a} {b} times", "repeat {a} {b} times and add it all up", "find the product of {a} and {b}",
                 "multiply together {a} and {b}"),
    "divide": ("divide {a} by {b}", "split {a} into {b} parts", "share {a} among {b}", "share {a} equally between {b}",
               "split {a} {b} ways", "cut {a} into {b} pieces", "distribute {a} over {b}",
               "divide {a} into {b} groups", "break {a} into {b} parts", "deal {a} out to {b} people"),
}
_PLEASE = ("please", "can you", "could you", "would you", "I need you to", "go ahead and", "help me",
           "I want to", "now", "quickly")
_FRAMES = ("[ask] [expr][end]", "[expr][end]", "[ask] [expr][end] [tail]", "[cmd][end]", "[please] [cmd][end]",
           "[cmd] and tell me the result[end]", "What do I get if I [cmd]?", "If you [cmd], what is the result?",
           "[cmd]. [tail]", "How much is it when you [cmd]?",
           # words that name no operation, in every operation's frames alike, so none of them leans
           # towards one ("equal" once came mostly with division's "equal parts")
           "What does [expr] equal?", "[expr] is equal to[end]", "What does [expr] come to?",
           "[expr] makes how much?", "What number is [expr]?", "[expr], equal to what?")
_TAIL = ("Thanks.", "I need it now.", "Show your work.", "Just the number.", "Be quick.", "It's for homework.")


def _arithmetic(operation: str, extra: tuple[str, ...], held_out: tuple[str, ...]) -> Phrasings:
    lexicon = {"ask": _ASK, "end": _END, "expr": _EXPRESSIONS[operation] + _MORE_EXPRESSIONS[operation],
               "tail": _TAIL, "cmd": _COMMANDS[operation], "please": _PLEASE}
    return Phrasings(train=tuple(dict.fromkeys(extra + compose(_FRAMES, lexicon, held_out))), held_out=held_out)


ADDITION = _arithmetic(
    'add',
    ('What is {a} + {b}?', '{a}+{b}=?', '{a} + {b} = ?', '{a} + {b}', 'Add {a} and {b}.', 'Compute {a} plus {b}.', 'How much is {a} + {b}?', "What's {a} plus {b}?", 'Calculate {a} + {b}.', 'What is the sum of {a} and {b}?', '{a} plus {b}?', 'Sum {a} and {b}.', 'What do you get when you add {a} and {b}?', 'how much is {a} plus {b}', 'What is {a}+{b}', 'Work out {a} + {b}.', '{a} + {b} equals?', 'Please add {a} to {b}.'),
    ('Could you work out {a} + {b}?', '{a} and {b} added together is what?', 'Tell me {a} plus {b}.', 'what does {a}+{b} make', 'Find the total of {a} and {b}.', "What's {a} + {b} equal to?"),
)
SUBTRACTION = _arithmetic(
    'subtract',
    ('What is {a} - {b}?', '{a}-{b}=?', '{a} - {b} = ?', '{a} - {b}', 'Compute {a} minus {b}.', "What's {a} minus {b}?", 'How much is {a} - {b}?', 'Calculate {a} - {b}.', '{a} minus {b}?', 'What is {a}-{b}', 'Work out {a} - {b}.', 'how much is {a} minus {b}', '{a} - {b} equals?'),
    ('Could you work out {a} - {b}?', 'Tell me {a} minus {b}.', 'what does {a}-{b} make', "What's {a} - {b} equal to?", '{a} take away {b} is?'),
)
MULTIPLICATION = _arithmetic(
    'multiply',
    ('What is {a} * {b}?', '{a}*{b}=?', '{a} × {b} = ?', '{a} x {b}', 'What is {a} times {b}?', 'Compute {a} times {b}.', 'Multiply {a} by {b}.', 'How much is {a} * {b}?', "What's {a} multiplied by {b}?", 'Calculate {a} × {b}.', 'What is the product of {a} and {b}?', '{a} times {b}?', 'What is {a}*{b}', 'Work out {a} * {b}.', 'how much is {a} times {b}', '{a} * {b}'),
    ('Could you work out {a} * {b}?', 'Tell me {a} times {b}.', 'what does {a}x{b} make', '{a} multiplied with {b} is what?', "What's {a} * {b} equal to?"),
)
DIVISION = _arithmetic(
    'divide',
    ('What is {a} / {b}?', '{a}/{b}=?', '{a} ÷ {b} = ?', '{a} / {b}', 'What is {a} divided by {b}?', 'Divide {a} by {b}.', 'Compute {a} divided by {b}.', 'How much is {a} / {b}?', "What's {a} over {b}?", 'Calculate {a} ÷ {b}.', 'How many times does {b} go into {a}?', '{a} divided by {b}?', 'What is {a}/{b}', 'Work out {a} / {b}.', 'how much is {a} divided by {b}'),
    ('Could you work out {a} / {b}?', 'Tell me {a} divided by {b}.', 'what does {a}/{b} make', '{a} shared equally by {b} is what?', "What's {a} / {b} equal to?"),
)
# Phrasings that name the larger number first; they never ask for a negative result.
_SUBTRACTION_FROM_HELD_OUT = ('Remove {b} from {a}. What is left?', 'How much is left when {b} is taken from {a}?')
SUBTRACTION_FROM = Phrasings(
    train=('Subtract {b} from {a}.', 'Take {b} away from {a}.', 'What is the difference between {a} and {b}?', 'What do you get if you subtract {b} from {a}?', 'Take away {b} from {a}.') + compose(("[take] {b} [from] {a}[end]", "[ask] {a} without {b}[end]"), {
        "take": ("Subtract", "Take", "Take away", "Deduct", "subtract", "take", "Minus"),
        "from": ("from", "away from", "off"), "end": _END, "ask": _ASK}, _SUBTRACTION_FROM_HELD_OUT),
    held_out=_SUBTRACTION_FROM_HELD_OUT)
_CONVERT = ("Convert", "Change", "Turn", "Express", "Switch", "Transform", "convert", "Translate", "Put", "Rewrite")
_CONVERSION_HELD_OUT = ('Please convert {n} {s} into {t}.', "What's {n} {s} expressed in {t}?", '{n} {s} makes how many {t}?', 'I have {n} {s}. How many {t} is that?', 'Could you give me {n} {s} in {t}?')
CONVERSION = Phrasings(
    train=tuple(dict.fromkeys(('Convert {n} {s} to {t}.', 'How many {t} are in {n} {s}?', 'What is {n} {s} in {t}?', 'Express {n} {s} in {t}.', '{n} {s} to {t}', '{n} {s} in {t}?', 'How many {t} is {n} {s}?', 'Turn {n} {s} into {t}.', '{n} {s} equals how many {t}?', 'Change {n} {s} to {t}.', 'convert {n} {s} into {t}', "What's {n} {s} in {t}?") + compose((
        "[convert] {n} {s} [into] {t}[end]", "[ask] {n} {s} [into] {t}[end]", "How many {t} [are] {n} {s}[end]",
        "{n} {s} [into] {t}[end]", "{n} {s} = ? {t}", "{n} {s} is how many {t}[end]",
        "[convert] {n} {s} [into] {t}, [tail]", "How many {t} [are] there in {n} {s}[end]"), {
        "convert": _CONVERT, "into": ("in", "to", "into", "as", "in terms of"), "end": _END, "ask": _ASK,
        "are": ("are in", "is", "in", "are"),
        "tail": ("please", "thanks", "quickly", "I need it for a recipe", "for my homework")},
        _CONVERSION_HELD_OUT))),
    held_out=_CONVERSION_HELD_OUT)


def _operand(rng: random.Random, low: int = 0) -> int:
    digits = rng.choices((1, 2, 3), weights=(0.2, 0.45, 0.35))[0]
    return rng.randint(max(low, 0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1)


def _digit(number: int, column: int) -> int:
    return number // 10**column % 10


def _width(*numbers: int) -> int:
    return max(len(str(number)) for number in numbers)


def addition_trace(a: int, b: int) -> str:
    """Column sums with carries; the last column's sum is written whole."""
    lines, carry = [f"{a} + {b}:"], 0
    width = _width(a, b)
    for column in range(width):
        x, y = _digit(a, column), _digit(b, column)
        total = x + y + carry
        terms = f"{x} + {y}" if column == 0 else f"{x} + {y} + {carry}"
        if column == width - 1:
            lines.append(f"{COLUMNS[column]}: {terms} = {total}.")
        else:
            lines.append(f"{COLUMNS[column]}: {terms} = {total}, write {total % 10}, carry {total // 10}.")
        carry = total // 10
    return "\n".join(lines)


def subtraction_trace(a: int, b: int) -> str:
    """Column differences of a - b (a >= b) with borrows; leading zeros are written too."""
    lines, borrow = [], 0
    for column in range(_width(a, b)):
        x, y = _digit(a, column), _digit(b, column)
        terms = f"{x} - {y}" if column == 0 else f"{x} - {borrow} - {y}"
        value = x - borrow - y
        if value < 0:
            lifted = f"{x + 10} - {y}" if column == 0 else f"{x + 10} - {borrow} - {y}"
            lines.append(f"{COLUMNS[column]}: {terms} needs a borrow: {lifted} = {value + 10}.")
            borrow = 1
        else:
            lines.append(f"{COLUMNS[column]}: {terms} = {value}.")
            borrow = 0
    return "\n".join(lines)


def multiplication_trace(a: int, factor: int) -> str:
    """Column products of a by a one-digit factor with carries; the last column's value whole."""
    lines, carry = [f"{a} × {factor}:"], 0
    width = len(str(a))
    for column in range(width):
        x = _digit(a, column)
        value = x * factor + carry
        terms = f"{x} × {factor}" if column == 0 else f"{x} × {factor} + {carry}"
        if column == width - 1:
            lines.append(f"{COLUMNS[column]}: {terms} = {value}.")
        else:
            lines.append(f"{COLUMNS[column]}: {terms} = {value}, write {value % 10}, carry {value // 10}.")
        carry = value // 10
    return "\n".join(lines)


def division_trace(a: int, divisor: int) -> str:
    """Long division of a by a one-digit divisor, one digit of a at a time."""
    lines, remainder = [f"{a} ÷ {divisor}:"], 0
    for digit in str(a):
        current = remainder * 10 + int(digit)
        lines.append(f"{current} ÷ {divisor} = {current // divisor}, remainder {current % divisor}.")
        remainder = current % divisor
    return "\n".join(lines)


def addition(rng: random.Random, split: Split) -> Task:
    a, b = _operand(rng), _operand(rng)
    question = ADDITION.pick(rng, split).format(a=write_number(rng, a), b=write_number(rng, b))
    return Task(dress(rng, question, split), addition_trace(a, b), f"{a} + {b} = {a + b}",
                Expectation(TaskKind.ADDITION, number=a + b))


def subtraction(rng: random.Random, split: Split) -> Task:
    a, b = _operand(rng), _operand(rng)
    negative = rng.random() < 0.12 and a != b
    if negative:
        a, b = min(a, b), max(a, b)
        pool = SUBTRACTION
    else:
        a, b = max(a, b), min(a, b)
        pool = SUBTRACTION if rng.random() < 0.75 else SUBTRACTION_FROM
    question = pool.pick(rng, split).format(a=write_number(rng, a), b=write_number(rng, b))
    if negative:
        reasoning = f"{a} - {b}: {b} is larger, so the result is -({b} - {a}).\n" + subtraction_trace(b, a)
    else:
        reasoning = f"{a} - {b}:\n" + subtraction_trace(a, b)
    return Task(dress(rng, question, split), reasoning, f"{a} - {b} = {a - b}",
                Expectation(TaskKind.SUBTRACTION, number=a - b))


def multiplication(rng: random.Random, split: Split) -> Task:
    factor = rng.randint(2, 9) if rng.random() < 0.9 else rng.randint(0, 1)
    a = _operand(rng)
    first, second = (a, factor) if rng.random() < 0.6 else (factor, a)
    question = MULTIPLICATION.pick(rng, split).format(a=write_number(rng, first), b=write_number(rng, second))
    return Task(dress(rng, question, split), multiplication_trace(a, factor), f"{first} × {second} = {a * factor}",
                Expectation(TaskKind.MULTIPLICATION, number=a * factor))


def division(rng: random.Random, split: Split) -> Task:
    divisor = rng.randint(2, 9)
    quotient = rng.randint(1, 999 // divisor) if rng.random() < 0.8 else rng.randint(1, 12)
    a = divisor * quotient
    question = DIVISION.pick(rng, split).format(a=write_number(rng, a), b=write_number(rng, divisor))
    return Task(dress(rng, question, split), division_trace(a, divisor), f"{a} ÷ {divisor} = {quotient}",
                Expectation(TaskKind.DIVISION, number=quotient))


def unit_conversion(rng: random.Random, split: Split) -> Task:
    row = rng.choice(UNIT_CONVERSIONS)
    to_larger = rng.random() < 0.25
    if to_larger:  # e.g. 5000 meters to kilometers: a multiple of the factor, divided
        result = rng.randint(1, row.max_amount)
        amount = result * row.factor
        source_names, target_names = (row.target, row.target_abbreviations), (row.source, row.source_abbreviations)
        source_singular, target_singular = row.target_singular, row.singular
    else:
        amount = rng.randint(1, row.max_amount)
        result = amount * row.factor
        source_names, target_names = (row.source, row.source_abbreviations), (row.target, row.target_abbreviations)
        source_singular, target_singular = row.singular, row.target_singular
    source_word = source_singular if amount == 1 else source_names[0]
    target_word = target_names[0]
    source = rng.choice(source_names[1]) if rng.random() < 0.3 else source_word
    target = rng.choice(target_names[1]) if rng.random() < 0.3 else target_word
    question = CONVERSION.pick(rng, split).format(n=amount, s=source, t=target)
    if to_larger:
        reasoning = f"1 {row.singular} is {row.factor} {row.target}, so {amount} ÷ {row.factor} = {result}."
    else:
        reasoning = f"1 {row.singular} is {row.factor} {row.target}, so {amount} × {row.factor} = {result}."
    result_word = target_singular if result == 1 else target_word
    content = f"{amount} {source_word} is {result} {result_word}."
    return Task(dress(rng, question, split, casing=False), reasoning, content,
                Expectation(TaskKind.UNIT_CONVERSION, number=result))
