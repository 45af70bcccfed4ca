"""Conversation tasks of the demo (host side): small talk, who the model is and what it can do, a
polite refusal outside its domain, and follow-up questions that need an earlier turn.

The answers are short fixed sentences that say truthfully what the model is: a small demo model
that Helios trains itself and serves.
"""

from __future__ import annotations

import random

from helios.demo.arithmetic import addition_trace, multiplication_trace, subtraction_trace
from helios.demo.kinds import Expectation, Split, Task, TaskKind
from helios.demo.phrasing import Phrasings, dress
from helios.demo.vocabulary import CITIES, NAMES

IDENTITY_ANSWER = ("I am the Helios demo model, a small language model that Helios trains and serves. I can do "
                   "arithmetic, convert units, answer in JSON and call the tools you give me.")
CAPABILITIES_ANSWER = ("I can add, subtract, multiply and divide numbers, convert units, copy and reverse text, "
                       "answer in JSON and call the tools you give me.")
REFUSAL = ("Sorry, I can't help with that. I am a small demo model: I can do arithmetic, convert units, answer in "
           "JSON and call the tools you give me.")

# intent: (phrasings, reasoning, answer, facts the answer must hold)
SMALL_TALK: dict[str, tuple[Phrasings, str, str, tuple[str, ...]]] = {
    "greeting": (Phrasings(
        train=("hi", "hello", "hey", "Hi!", "Hello!", "Hey there", "good morning", "Good afternoon!", "hi there",
               "Hello, anyone there?", "yo", "greetings", "Hey!", "hello :)"),
        held_out=("hiya", "Good evening!", "howdy", "Hello hello", "Hi, nice to meet you")),
        "The user greets me.", "Hello! How can I help you?", ("Hello",)),
    "wellbeing": (Phrasings(
        train=("how are you?", "How are you doing?", "how's it going?", "Are you OK?", "How are you today?",
               "how do you feel?", "Hi, how are you?"),
        held_out=("How do you do?", "How are things?", "You doing alright?")),
        "The user asks how I am.", "I'm fine, thanks. How can I help you?", ("fine",)),
    "thanks": (Phrasings(
        train=("thanks", "thank you", "Thanks a lot!", "Thank you very much.", "great, thanks", "cheers", "ty",
               "Perfect, thank you!", "thanks!"),
        held_out=("Many thanks!", "thx, that helped", "Much appreciated.", "Thanks a bunch")),
        "The user thanks me.", "You're welcome!", ("welcome",)),
    "farewell": (Phrasings(
        train=("bye", "goodbye", "see you", "That's all, bye!", "Bye!", "good bye", "see ya", "I'm done, goodbye."),
        held_out=("See you later!", "Farewell.", "Catch you later", "Talk soon, bye")),
        "The user says goodbye.", "Goodbye!", ("Goodbye",)),
}
IDENTITY: dict[str, tuple[Phrasings, str, str, tuple[str, ...]]] = {
    "who": (Phrasings(
        train=("Who are you?", "what are you?", "What's your name?", "Are you a robot?", "Introduce yourself.",
               "Tell me about yourself.", "Are you human?", "Hello! Who are you?", "who made you?",
               "Are you ChatGPT?", "What model are you?", "what is your name", "who am I talking to?"),
        held_out=("What should I call you?", "Are you a person or a program?", "What kind of assistant are you?",
                  "Hi! What are you exactly?", "Could you tell me who you are?")),
        "The user asks who I am.", IDENTITY_ANSWER, ("Helios",)),
    "skills": (Phrasings(
        train=("What can you do?", "help", "What are you good at?", "How can you help me?", "What do you know?",
               "what are your skills?", "What can I ask you?", "What are you for?", "list your features"),
        held_out=("Which tasks can you handle?", "What things can you help with?", "Show me what you can do.",
                  "What are you able to do?")),
        "The user asks what I can do.", CAPABILITIES_ANSWER, ("convert units",)),
}

OUT_OF_DOMAIN = Phrasings(
    train=("Write a poem about {topic}.", "Tell me a joke.", "What is the capital of {country}?", "Tell me a story about {topic}.",
           "Explain {subject} to me.", "What is the meaning of life?", "Recommend a movie.", "Give me a recipe for {dish}.",
           "Who is the president of {country}?", "Write a program that sorts a list.", "Summarize this article for me.",
           "Can you draw a cat?", "Help me with my essay about {topic}.", "What should I cook tonight?",
           "Who won the world cup?", "Write a song about {topic}.", "What's the best book about {subject}?",
           "How do I fix my car?", "Tell me something about {country}.", "What is {subject}?", "Sing me a song.",
           "Which language is spoken in {country}?", "Write an essay on {topic}."),
    held_out=("Compose a haiku about {topic}.", "What's the population of {country}?", "Plan my holiday in {country}.",
              "Describe {subject} in detail.", "Who invented the telephone?", "Can you recommend a good {dish} place?",
              "Write a limerick about {topic}.", "Why is the sky blue?"),
)
TOPICS = ("the sea", "love", "autumn", "a dragon", "the moon", "friendship", "my cat", "the city", "winter")
COUNTRIES = ("France", "Japan", "Brazil", "Kenya", "Canada", "India", "Norway", "Peru", "Egypt", "Spain")
SUBJECTS = ("quantum physics", "photosynthesis", "the stock market", "black holes", "history", "democracy",
            "machine learning", "economics")
DISHES = ("pancakes", "lasagna", "curry", "sushi", "paella", "soup", "pizza")

FOLLOW_UPS = {  # operation: phrasings with {n}
    "add": Phrasings(train=("Now add {n} to that.", "And plus {n}?", "Add {n} to it.", "What about adding {n}?",
                            "plus {n}?", "Then add {n}."),
                     held_out=("Increase that by {n}.", "Put {n} more on top of it.")),
    "subtract": Phrasings(train=("Now subtract {n} from that.", "And minus {n}?", "Take {n} from it.",
                                 "minus {n}?", "Subtract {n} from the result."),
                          held_out=("Reduce that by {n}.", "Knock {n} off the result.")),
    "multiply": Phrasings(train=("Now multiply that by {n}.", "And times {n}?", "Multiply it by {n}.",
                                 "times {n}?", "Multiply the result by {n}."),
                          held_out=("Scale that by {n}.", "What is that times {n}?")),
}
NAME_TELL = Phrasings(train=("My name is {name}.", "I'm {name}.", "Call me {name}.", "Hi, I am {name}."),
                      held_out=("People call me {name}.", "Hello, {name} here."))
NAME_ASK = Phrasings(train=("What's my name?", "Do you remember my name?", "Who am I?", "What is my name?",
                            "Say my name."), held_out=("Remind me what I'm called.", "Can you recall my name?"))
CITY_TELL = Phrasings(train=("I live in {city}.", "I'm from {city}.", "My home is {city}."),
                      held_out=("I grew up in {city} and still live there.",))
CITY_ASK = Phrasings(train=("Where do I live?", "Do you remember where I live?", "Which city am I from?"),
                     held_out=("Where is my home?", "Can you recall my city?"))


def _worded(rng: random.Random, split: Split, kind: TaskKind,
            table: dict[str, tuple[Phrasings, str, str, tuple[str, ...]]]) -> Task:
    phrasings, reasoning, answer, facts = table[rng.choice(sorted(table))]
    question = dress(rng, phrasings.pick(rng, split), split, fillers=False)
    return Task(question, reasoning, answer, Expectation(kind, facts=facts))


def small_talk(rng: random.Random, split: Split) -> Task:
    return _worded(rng, split, TaskKind.SMALL_TALK, SMALL_TALK)


def identity(rng: random.Random, split: Split) -> Task:
    return _worded(rng, split, TaskKind.IDENTITY, IDENTITY)


def out_of_domain(rng: random.Random, split: Split) -> Task:
    question = OUT_OF_DOMAIN.pick(rng, split).format(
        topic=rng.choice(TOPICS), country=rng.choice(COUNTRIES), subject=rng.choice(SUBJECTS), dish=rng.choice(DISHES))
    return Task(dress(rng, question, split, casing=False), "This is outside what I can do.", REFUSAL,
                Expectation(TaskKind.OUT_OF_DOMAIN, facts=("can't help",)))


def _turn(user: str, assistant: str) -> tuple[dict[str, str], dict[str, str]]:
    return {"role": "user", "content": user}, {"role": "assistant", "content": assistant}


def multi_turn(rng: random.Random, split: Split) -> Task:
    """A follow-up question that needs an earlier turn: arithmetic on the last answer, or a recalled detail."""
    pattern = rng.choices(("arithmetic", "name", "city"), weights=(0.6, 0.2, 0.2))[0]
    if pattern == "name":
        name = rng.choice(NAMES)
        history = _turn(NAME_TELL.pick(rng, split).format(name=name), f"Nice to meet you, {name}!")
        return Task(NAME_ASK.pick(rng, split), f"The user told me their name: {name}.", f"Your name is {name}.",
                    Expectation(TaskKind.MULTI_TURN, facts=(name,)), history=history)
    if pattern == "city":
        city = rng.choice(CITIES)
        history = _turn(CITY_TELL.pick(rng, split).format(city=city), f"{city} is a nice place!")
        return Task(CITY_ASK.pick(rng, split), f"The user told me they live in {city}.", f"You live in {city}.",
                    Expectation(TaskKind.MULTI_TURN, facts=(city,)), history=history)
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    first = f"What is {a} + {b}?" if rng.random() < 0.5 else f"{a} + {b}"
    result = a + b
    history = _turn(first, f"{a} + {b} = {result}")
    operation = rng.choice(sorted(FOLLOW_UPS))
    if operation == "add":
        n = rng.randint(1, 99)
        trace, content, value = addition_trace(result, n), f"{result} + {n} = {result + n}", result + n
    elif operation == "subtract":
        n = rng.randint(1, result)
        trace, content, value = f"{result} - {n}:\n" + subtraction_trace(result, n), f"{result} - {n} = {result - n}", result - n
    else:
        n = rng.randint(2, 9)
        trace, content, value = multiplication_trace(result, n), f"{result} × {n} = {result * n}", result * n
    question = FOLLOW_UPS[operation].pick(rng, split).format(n=n)
    return Task(question, f"The previous answer was {result}.\n{trace}", content,
                Expectation(TaskKind.MULTI_TURN, number=value), history=history)
