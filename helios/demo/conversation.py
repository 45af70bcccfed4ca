"""Conversation tasks of the demo (host side): small talk, who the model is and what it can do, a
polite refusal outside its domain, and follow-up questions that need an earlier turn.

The answers are short fixed sentences that say truthfully what the model is: a small demo model
that Helios trains itself and serves.
"""

from __future__ import annotations

import random

from helios.demo.arithmetic import addition_trace, multiplication_trace, subtraction_trace
from helios.demo.kinds import Expectation, Split, Task, TaskKind
from helios.demo.phrasing import Phrasings, compose, dress
from helios.demo.vocabulary import CITIES, NAMES

IDENTITY_ANSWER = ("I am the Helios demo model, a small language model that Helios trains and serves. I can do "
                   "arithmetic, convert units, answer in JSON and call the tools you give me.")
CAPABILITIES_ANSWER = ("I can add, subtract, multiply and divide numbers, convert units, copy and reverse text, "
                       "answer in JSON and call the tools you give me.")
REFUSAL = ("Sorry, I can't help with that. I am a small demo model: I can do arithmetic, convert units, answer in "
           "JSON and call the tools you give me.")

_TALK = {
    "hi": ("hi", "hello", "hey", "hey there", "hi there", "hello there", "heya", "greetings", "good morning",
           "good afternoon", "morning", "yo", "hallo", "hey hey", "sup", "hi again", "hello again"),
    "you": ("", " you", " friend", " assistant", " Helios", " bot", " buddy", " everyone", " all"),
    "mark": ("", "!", ".", " :)", "!!", "?", " !"),
    "how": ("how are you", "how are you doing", "how's it going", "how is it going", "how do you feel",
            "are you ok", "are you doing well", "how have you been", "how are you feeling", "how's your day",
            "what's up", "how goes it", "all good with you", "how are things going", "you ok"),
    "today": ("", " today", " now", " these days", " this morning"),
    "thanks": ("thanks", "thank you", "thanks a lot", "thank you very much", "thanks so much", "thank you so much",
               "many thanks to you", "thank you kindly", "appreciate it", "I appreciate it", "I appreciate that",
               "ty", "tyvm", "thanks a ton", "big thanks", "merci", "thank u", "thankyou", "I owe you one"),
    "good": ("", "great, ", "perfect, ", "ok ", "awesome, ", "nice, ", "cool, ", "super, ", "wonderful, ",
             "that helped, ", "got it, ", "excellent, ", "brilliant, "),
    "bye": ("bye", "goodbye", "good bye", "bye bye", "see you", "see ya", "later", "take care", "so long",
            "have a nice day", "good night", "bye for now", "until next time", "cya", "I'm off", "gotta go"),
    "done": ("", "that's all, ", "I'm done, ", "ok, ", "thanks, ", "alright, ", "that's it, ", "all done, "),
    "who": ("who are you", "what are you", "what's your name", "what is your name", "are you a robot",
            "introduce yourself", "tell me about yourself", "are you human", "who made you", "are you ChatGPT",
            "what model are you", "who am I talking to", "who is this", "what is this", "are you an AI",
            "are you a bot", "are you real", "are you a machine", "what's your deal", "who built you",
            "what do I call you", "what is Helios", "are you alive", "are you a language model",
            "do you have a name", "who created you", "what are you called", "whom am I chatting with",
            "what kind of program are you", "what sort of thing are you", "what type of AI are you",
            "who or what are you", "are you a person", "are you a program", "are you software", "is this a bot",
            "is this a human", "what am I talking to", "what are you supposed to be", "what system is this",
            "which model is this", "who runs you", "what kind of bot is this", "are you an assistant",
            "what is your identity", "what's behind this chat", "is anyone there or is this a machine",
            "are you a computer", "who trained you", "where do you come from", "what kind of thing is this"),
    # an identity question asked inside a sentence: "can you tell me [whoq]"
    "whoq": ("who you are", "what you are", "what your name is", "who made you", "what kind of assistant you are",
             "what model you are", "who built you", "what I should call you", "what you are exactly",
             "whether you are a bot", "whether you are human", "what sort of program this is", "who I am talking to",
             "what you really are", "where you come from", "who trained you"),
    "really": ("", "", "", " exactly", " really", " actually", " anyway", " then", " again", " even"),
    "tellq": ("can you tell me", "tell me", "I'd like to know", "I wonder", "do you mind telling me",
              "I want to know", "please explain", "may I ask", "I'm curious", "let me know"),
    # a skills question asked inside a sentence: "tell me [canq]"
    "canq": ("what you can do", "what you are good at", "how you can help me", "what tasks you handle",
             "what you are able to do", "what I can ask you", "what your skills are", "what you are for",
             "how I can use you", "what you can help with", "what you know how to do", "which jobs you take"),
    "can": ("what can you do", "what are you good at", "how can you help me", "what do you know",
            "what are your skills", "what can I ask you", "what are you for", "list your features",
            "help", "what do you do", "what can you help me with", "how do you work", "what can you handle",
            "what are your abilities", "what tasks do you do", "what are your capabilities", "what do you offer",
            "how can I use you", "what are you capable of", "what can you answer", "what is possible here",
            "what can you tell me"),
    "lead": ("", "hi! ", "hello, ", "hey, ", "so ", "ok, ", "quick question: ", "excuse me, ", "um ", "and "),
}
_GREETING_HELD_OUT = ("hiya", "Good evening!", "howdy", "Hello hello", "Hi, nice to meet you")
_WELLBEING_HELD_OUT = ("How do you do?", "How are things?", "You doing alright?")
_THANKS_HELD_OUT = ("Many thanks!", "thx, that helped", "Much appreciated.", "Thanks a bunch")
_FAREWELL_HELD_OUT = ("See you later!", "Farewell.", "Catch you later", "Talk soon, bye")
_WHO_HELD_OUT = ("What should I call you?", "Are you a person or a program?", "What kind of assistant are you?",
                 "Hi! What are you exactly?", "Could you tell me who you are?")
_SKILLS_HELD_OUT = ("Which tasks can you handle?", "What things can you help with?", "Show me what you can do.",
                    "What are you able to do?")


def _talk(frames: tuple[str, ...], held_out: tuple[str, ...], plain: tuple[str, ...] = ()) -> Phrasings:
    """`plain` phrasings and the expansions of `frames` over the shared small-talk lexicon."""
    return Phrasings(train=tuple(dict.fromkeys(plain + compose(frames, _TALK, held_out))), held_out=held_out)


# intent: (phrasings, reasoning, answer, facts the answer must hold); each reasoning opens with its intent
SMALL_TALK: dict[str, tuple[Phrasings, str, str, tuple[str, ...]]] = {
    "greeting": (_talk(("[hi][you][mark]", "[hi][you], anyone there?",
                        "[hi][mark] [hi][you][mark]"), _GREETING_HELD_OUT,
                 ('hi', 'hello', 'hey', 'Hi!', 'Hello!', 'Hey there', 'good morning', 'Good afternoon!', 'hi there', 'Hello, anyone there?', 'yo', 'greetings', 'Hey!', 'hello :)')),
                 "Greeting: the user says hello.", "Hello! How can I help you?", ("Hello",)),
    "wellbeing": (_talk(("[how][today][mark]", "[hi], [how][today][mark]", "[hi][you]! [how][today]?"),
                        _WELLBEING_HELD_OUT,
                 ('how are you?', 'How are you doing?', "how's it going?", 'Are you OK?', 'How are you today?', 'how do you feel?', 'Hi, how are you?')),
                  "Wellbeing: the user asks how I am.", "I'm fine, thanks. How can I help you?", ("fine",)),
    "thanks": (_talk(("[good][thanks][mark]", "[good][thanks][you][mark]", "[thanks], that was helpful[mark]",
                      "[thanks] for the help[mark]", "[thanks] for that[mark]"), _THANKS_HELD_OUT,
                 ('thanks', 'thank you', 'Thanks a lot!', 'Thank you very much.', 'great, thanks', 'cheers', 'ty', 'Perfect, thank you!', 'thanks!')),
               "Thanks: the user thanks me.", "You're welcome!", ("welcome",)),
    "farewell": (_talk(("[done][bye][mark]", "[done][bye][you][mark]", "[thanks], [bye][mark]"),
                       _FAREWELL_HELD_OUT,
                 ('bye', 'goodbye', 'see you', "That's all, bye!", 'Bye!', 'good bye', 'see ya', "I'm done, goodbye.")),
                 "Farewell: the user says goodbye.", "Goodbye!", ("Goodbye",)),
}
IDENTITY: dict[str, tuple[Phrasings, str, str, tuple[str, ...]]] = {
    "who": (_talk(("[lead][who][mark]", "[hi][you][mark] [who][mark]", "[lead]tell me, [who]?",
                   "[lead][who][really][mark]", "[hi][you][mark] [who][really]?", "[lead][tellq] [whoq][mark]",
                   "[hi][you][mark] [tellq] [whoq]?"), _WHO_HELD_OUT,
                 ('Who are you?', 'what are you?', "What's your name?", 'Are you a robot?', 'Introduce yourself.', 'Tell me about yourself.', 'Are you human?', 'Hello! Who are you?', 'who made you?', 'Are you ChatGPT?', 'What model are you?', 'what is your name', 'who am I talking to?')),
            "Identity: the user asks who I am.", IDENTITY_ANSWER, ("Helios",)),
    "skills": (_talk(("[lead][can][mark]", "[hi][you][mark] [can][mark]", "[lead]tell me [can]",
                      "[lead][tellq] [canq][mark]", "[hi][you][mark] [tellq] [canq]?", "[lead][can][really]?"),
                     _SKILLS_HELD_OUT,
                 ('What can you do?', 'help', 'What are you good at?', 'How can you help me?', 'What do you know?', 'what are your skills?', 'What can I ask you?', 'What are you for?', 'list your features')),
               "Skills: the user asks what I can do.", CAPABILITIES_ANSWER, ("convert units",)),
}

_OUT_OF_DOMAIN_HELD_OUT = ("Compose a haiku about {topic}.", "What's the population of {country}?",
                           "Plan my holiday in {country}.", "Describe {subject} in detail.", "Who invented the telephone?",
                           "Can you recommend a good {dish} place?", "Write a limerick about {topic}.", "Why is the sky blue?")
_OUT_OF_DOMAIN_LEXICON = {
    "ask": ("", "Can you ", "Could you ", "Please ", "I want you to ", "Would you ", "Go on, ", "Hey, can you "),
    "write": ("write", "make up", "create", "draft", "come up with", "give me", "tell me"),
    "piece": ("a poem", "a story", "a song", "an essay", "a joke", "a rap", "a letter", "a speech", "a short tale",
              "a blog post", "a tweet", "a riddle", "some lyrics", "a sonnet", "a fable"),
    "about": ("about", "on", "for"),
    "wh": ("Why do cats purr", "Why do birds fly south", "How do planes fly", "How does the internet work",
           "Why is grass green", "How far is the moon", "When did the Romans rule", "Where do rivers start",
           "How old is the universe", "Why do we dream", "What causes rain", "How do magnets work",
           "Who painted the Mona Lisa", "Who wrote Hamlet", "When was the printing press invented",
           "What is the tallest mountain", "Why do leaves fall", "How do vaccines work", "What are black holes made of",
           "Who discovered gravity", "How big is {country}", "What is the history of {country}",
           "What do people eat in {country}", "What is the best time to visit {country}", "Who founded {country}",
           "What is {subject} used for", "Why does {subject} matter", "Is {subject} hard to learn",
           "What should I wear today", "Should I buy a new phone", "What is love", "Is coffee healthy",
           "How do I lose weight", "How do I learn to swim", "Where can I buy {dish}", "How do I make {dish}",
           "What goes well with {dish}", "Which team will win tonight", "What's a good name for my dog",
           "How do I fix a flat tire", "Can you book me a doctor", "Can you order me {dish}", "Play some music",
           "Open the door", "Call my mom", "Translate this into Chinese", "Find me a job", "Debug my code",
           "Write me some Python code", "Do my taxes", "Draw a picture of {topic}", "What is the news today",
           "Who is the richest person", "What stocks should I buy", "Diagnose my headache", "Give me legal advice"),
    "end": ("?", "", ".", "??", "!"),
}
OUT_OF_DOMAIN = Phrasings(
    train=compose(("[ask][write] [piece] [about] {topic}[end]", "[ask]explain {subject}[end]",
                   "[ask]tell me about {subject}[end]", "[ask]recommend a movie about {topic}[end]",
                   "[wh][end]", "[ask]help me understand {subject}[end]"),
                  _OUT_OF_DOMAIN_LEXICON, _OUT_OF_DOMAIN_HELD_OUT) + ("Write a poem about {topic}.", "Tell me a joke.", "What is the capital of {country}?", "Tell me a story about {topic}.",
           "Explain {subject} to me.", "What is the meaning of life?", "Recommend a movie.", "Give me a recipe for {dish}.",
           "Who is the president of {country}?", "Write a program that sorts a list.", "Summarize this article for me.",
           "Can you draw a cat?", "Help me with my essay about {topic}.", "What should I cook tonight?",
           "Who won the world cup?", "Write a song about {topic}.", "What's the best book about {subject}?",
           "How do I fix my car?", "Tell me something about {country}.", "What is {subject}?", "Sing me a song.",
           "Which language is spoken in {country}?", "Write an essay on {topic}."),
    held_out=_OUT_OF_DOMAIN_HELD_OUT,
)
TOPICS = ("the sea", "love", "autumn", "a dragon", "the moon", "friendship", "my cat", "the city", "winter")
COUNTRIES = ("France", "Japan", "Brazil", "Kenya", "Canada", "India", "Norway", "Peru", "Egypt", "Spain")
SUBJECTS = ("quantum physics", "photosynthesis", "the stock market", "black holes", "history", "democracy",
            "machine learning", "economics")
DISHES = ("pancakes", "lasagna", "curry", "sushi", "paella", "soup", "pizza")

_FOLLOW_LEXICON = {
    "lead": ("", "Now ", "And ", "OK, now ", "Then ", "Next, ", "Great. Now ", "Cool, ", "Alright, ", "and ", "now "),
    "it": ("that", "it", "the result", "the answer", "this", "that number", "the last answer", "your answer"),
    "add": ("add {n} to", "plus {n} on", "add {n} onto", "put {n} on"),
    "plus": ("plus {n}", "+ {n}", "with {n} added", "add {n}", "+{n}"),
    "minus": ("minus {n}", "- {n}", "with {n} taken away", "less {n}", "-{n}"),
    "subtract": ("subtract {n} from", "take {n} from", "take {n} away from", "remove {n} from", "deduct {n} from"),
    "multiply": ("multiply", "times"),
    "times": ("times {n}", "* {n}", "x {n}", "multiplied by {n}", "× {n}", "*{n}"),
    "what": ("what is", "what's", "and", "how much is", "what about", "then"),
    "end": ("?", ".", "", "!"),
}


def _follow(frames: tuple[str, ...], train: tuple[str, ...], held_out: tuple[str, ...]) -> Phrasings:
    return Phrasings(train=tuple(dict.fromkeys(train + compose(frames, _FOLLOW_LEXICON, held_out))), held_out=held_out)


FOLLOW_UPS = {  # operation: phrasings with {n}
    "add": _follow(("[lead][add] [it][end]", "[lead][what] [it] [plus][end]", "[lead][plus][end]",
                    "[lead][it] [plus][end]"), *(('Now add {n} to that.', 'And plus {n}?', 'Add {n} to it.', 'What about adding {n}?', 'plus {n}?', 'Then add {n}.'), ('Increase that by {n}.', 'Put {n} more on top of it.'))),
    "subtract": _follow(("[lead][subtract] [it][end]", "[lead][what] [it] [minus][end]", "[lead][minus][end]",
                         "[lead][it] [minus][end]"), *(('Now subtract {n} from that.', 'And minus {n}?', 'Take {n} from it.', 'minus {n}?', 'Subtract {n} from the result.'), ('Reduce that by {n}.', 'Knock {n} off the result.'))),
    "multiply": _follow(("[lead][multiply] [it] by {n}[end]", "[lead][what] [it] [times][end]", "[lead][times][end]",
                         "[lead][it] [times][end]"), *(('Now multiply that by {n}.', 'And times {n}?', 'Multiply it by {n}.', 'times {n}?', 'Multiply the result by {n}.'), ('Scale that by {n}.', 'What is that times {n}?'))),
}
_TELL = {"lead": ("", "Hi, ", "Hello! ", "Hey, ", "By the way, ", "FYI ", "So, ", "Just so you know, "),
         "end": (".", "!", ""),
         "ask": ("", "Quick question: ", "Now, ", "Hey, ", "So ", "Tell me, ", "Do you know ", "Can you tell me "),
         "q": ("?", "", ".")}
NAME_TELL = Phrasings(train=tuple(dict.fromkeys(('My name is {name}.', "I'm {name}.", 'Call me {name}.', 'Hi, I am {name}.') + compose((
    "[lead]my name is {name}[end]", "[lead]I'm {name}[end]", "[lead]call me {name}[end]", "[lead]I am {name}[end]",
    "[lead]the name's {name}[end]", "[lead]you can call me {name}[end]", "[lead]this is {name}[end]"), _TELL, ('People call me {name}.', 'Hello, {name} here.')))),
    held_out=('People call me {name}.', 'Hello, {name} here.'))
NAME_ASK = Phrasings(train=tuple(dict.fromkeys(("What's my name?", 'Do you remember my name?', 'Who am I?', 'What is my name?', 'Say my name.') + compose((
    "[ask]what's my name[q]", "[ask]what is my name[q]", "[ask]do you remember my name[q]", "[ask]who am I[q]",
    "[ask]what did I say my name was[q]", "[ask]what do people call me[q]", "[ask]what was my name again[q]",
    "[ask]do you know my name[q]", "[ask]what am I called[q]"), _TELL, ("Remind me what I'm called.", 'Can you recall my name?')))), held_out=("Remind me what I'm called.", 'Can you recall my name?'))
CITY_TELL = Phrasings(train=tuple(dict.fromkeys(('I live in {city}.', "I'm from {city}.", 'My home is {city}.') + compose((
    "[lead]I live in {city}[end]", "[lead]I'm from {city}[end]", "[lead]my home is {city}[end]",
    "[lead]I am based in {city}[end]", "[lead]my city is {city}[end]", "[lead]home for me is {city}[end]",
    "[lead]I stay in {city}[end]"), _TELL, ('I grew up in {city} and still live there.',)))), held_out=('I grew up in {city} and still live there.',))
CITY_ASK = Phrasings(train=tuple(dict.fromkeys(('Where do I live?', 'Do you remember where I live?', 'Which city am I from?') + compose((
    "[ask]where do I live[q]", "[ask]which city am I from[q]", "[ask]where am I from[q]",
    "[ask]do you remember where I live[q]", "[ask]what city do I live in[q]", "[ask]where am I based[q]",
    "[ask]which city is my home[q]", "[ask]where did I say I live[q]"), _TELL, ('Where is my home?', 'Can you recall my city?')))), held_out=('Where is my home?', 'Can you recall my city?'))


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
